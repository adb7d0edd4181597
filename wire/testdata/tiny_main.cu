// Host program around tiny.cu: its executable's .nv_fatbin section holds two containers
// back to back, and .nvFatBinSegment the 24-byte wrappers pointing at them.
#include "tiny.cu"
int main() { return 0; }
