//! guest
