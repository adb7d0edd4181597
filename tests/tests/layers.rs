//! The crates' module trees have no import circle: at every level, the modules that are
//! siblings (children of one module) use each other one way only, so each room of the
//! tree can be read from the bottom up. A module's own children and ancestors do not
//! count (a parent declares and re-exports its children; a child uses its parent's
//! items); test code (`#[cfg(test)]` items, `tests.rs` files) does not count either.
//!
//! Read from the sources with `syn`: every `use` tree and every path in the code that
//! starts at `crate`, `super` or `self`, resolved to the deepest module it names.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use syn::visit::Visit;

type ModPath = Vec<String>;

/// Every module file of a crate's `src/`: its module path and its file.
fn module_files(src: &Path) -> BTreeMap<ModPath, PathBuf> {
    fn walk(dir: &Path, src: &Path, out: &mut BTreeMap<ModPath, PathBuf>) {
        for entry in std::fs::read_dir(dir).expect("read the source folder") {
            let path = entry.expect("a folder entry").path();
            if path.is_dir() {
                if path.file_name().is_some_and(|n| n != "bin") {
                    walk(&path, src, out);
                }
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let rel = path
                .strip_prefix(src)
                .expect("under src")
                .with_extension("");
            let mut parts: ModPath = rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            if matches!(
                parts.last().map(String::as_str),
                Some("lib" | "main" | "mod")
            ) {
                parts.pop();
            }
            // Test modules, and the files a parent includes by `#[path]` for tests.
            if parts.iter().any(|p| p == "tests" || p.ends_with("_tests")) {
                continue;
            }
            out.insert(parts, path);
        }
    }
    let mut out = BTreeMap::new();
    walk(src, src, &mut out);
    out
}

fn is_test_only(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        a.path().is_ident("cfg")
            && a.parse_args::<syn::Meta>()
                .is_ok_and(|m| m.path().is_ident("test"))
    })
}

/// The paths one file names, as written (`crate::a::b`, `super::c`), test code left out.
#[derive(Default)]
struct Named {
    paths: Vec<Vec<String>>,
}

impl Named {
    fn use_tree(&mut self, prefix: &[String], tree: &syn::UseTree) {
        match tree {
            syn::UseTree::Path(p) => {
                let mut next = prefix.to_vec();
                next.push(p.ident.to_string());
                self.use_tree(&next, &p.tree);
            }
            syn::UseTree::Name(n) => {
                let mut next = prefix.to_vec();
                if n.ident != "self" {
                    next.push(n.ident.to_string());
                }
                self.paths.push(next);
            }
            syn::UseTree::Rename(r) => {
                let mut next = prefix.to_vec();
                next.push(r.ident.to_string());
                self.paths.push(next);
            }
            syn::UseTree::Glob(_) => self.paths.push(prefix.to_vec()),
            syn::UseTree::Group(g) => {
                for t in &g.items {
                    self.use_tree(prefix, t);
                }
            }
        }
    }
}

impl<'ast> Visit<'ast> for Named {
    fn visit_item(&mut self, item: &'ast syn::Item) {
        let attrs = match item {
            syn::Item::Mod(m) => &m.attrs,
            syn::Item::Fn(f) => &f.attrs,
            syn::Item::Impl(i) => &i.attrs,
            syn::Item::Use(u) => &u.attrs,
            syn::Item::Struct(s) => &s.attrs,
            syn::Item::Enum(e) => &e.attrs,
            syn::Item::Const(c) => &c.attrs,
            syn::Item::Static(s) => &s.attrs,
            syn::Item::Trait(t) => &t.attrs,
            syn::Item::Type(t) => &t.attrs,
            syn::Item::Macro(m) => &m.attrs,
            _ => return syn::visit::visit_item(self, item),
        };
        if is_test_only(attrs) {
            return;
        }
        syn::visit::visit_item(self, item);
    }

    fn visit_impl_item_fn(&mut self, f: &'ast syn::ImplItemFn) {
        if !is_test_only(&f.attrs) {
            syn::visit::visit_impl_item_fn(self, f);
        }
    }

    fn visit_item_use(&mut self, u: &'ast syn::ItemUse) {
        self.use_tree(&[], &u.tree);
    }

    fn visit_path(&mut self, p: &'ast syn::Path) {
        let segs: Vec<String> = p.segments.iter().map(|s| s.ident.to_string()).collect();
        if matches!(
            segs.first().map(String::as_str),
            Some("crate" | "super" | "self")
        ) {
            self.paths.push(segs);
        }
        syn::visit::visit_path(self, p);
    }

    fn visit_macro(&mut self, m: &'ast syn::Macro) {
        // Macro bodies are tokens: the `crate::a::b` runs in them count as paths.
        let text = m.tokens.to_string().replace(' ', "");
        for (i, _) in text.match_indices("crate::") {
            let run: String = text[i..]
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
                .collect();
            self.paths
                .push(run.split("::").map(str::to_owned).collect());
        }
    }
}

/// The module `path`, written in module `at`, names: the deepest known module on it.
fn resolve(at: &[String], path: &[String], known: &BTreeSet<ModPath>) -> Option<ModPath> {
    let mut base: ModPath;
    let mut rest = path;
    match path.first().map(String::as_str) {
        Some("crate") => {
            base = Vec::new();
            rest = &path[1..];
        }
        Some("self") => {
            base = at.to_vec();
            rest = &path[1..];
        }
        Some("super") => {
            base = at.to_vec();
            while rest.first().is_some_and(|s| s == "super") {
                base.pop()?;
                rest = &rest[1..];
            }
        }
        _ => return None,
    }
    let mut best = None;
    for seg in rest {
        base.push(seg.clone());
        if known.contains(&base) {
            best = Some(base.clone());
        } else {
            break;
        }
    }
    best
}

/// For each module with children, the edges between its children: child a uses child b.
fn sibling_edges(src: &Path) -> BTreeMap<ModPath, BTreeMap<String, BTreeSet<String>>> {
    let files = module_files(src);
    let known: BTreeSet<ModPath> = files.keys().cloned().collect();
    let mut edges: BTreeMap<ModPath, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    for (module, file) in &files {
        let text = std::fs::read_to_string(file).expect("read a source file");
        let parsed = syn::parse_file(&text)
            .unwrap_or_else(|e| panic!("{}: does not parse: {e}", file.display()));
        let mut named = Named::default();
        named.visit_file(&parsed);
        for path in &named.paths {
            let Some(target) = resolve(module, path, &known) else {
                continue;
            };
            let common = module
                .iter()
                .zip(&target)
                .take_while(|(a, b)| a == b)
                .count();
            // One is the other's ancestor: not a sibling edge.
            if common == module.len() || common == target.len() {
                continue;
            }
            edges
                .entry(module[..common].to_vec())
                .or_default()
                .entry(module[common].clone())
                .or_default()
                .insert(target[common].clone());
        }
    }
    edges
}

/// The circles among one module's children: each strongly connected set of two or more.
fn circles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<BTreeSet<String>> {
    // Two sets are one circle where each reaches the other; the graphs are small.
    let nodes: BTreeSet<&String> = graph.keys().chain(graph.values().flatten()).collect();
    let reach = |from: &String| {
        let mut seen = BTreeSet::new();
        let mut todo = vec![from.clone()];
        while let Some(n) = todo.pop() {
            for next in graph.get(&n).into_iter().flatten() {
                if seen.insert(next.clone()) {
                    todo.push(next.clone());
                }
            }
        }
        seen
    };
    let reaches: BTreeMap<&String, BTreeSet<String>> =
        nodes.iter().map(|n| (*n, reach(n))).collect();
    let mut out: Vec<BTreeSet<String>> = Vec::new();
    for n in &nodes {
        if out.iter().any(|c| c.contains(*n)) {
            continue;
        }
        let set: BTreeSet<String> = nodes
            .iter()
            .filter(|m| reaches[*n].contains(**m) && reaches[*m].contains(*n))
            .map(|m| (*m).clone())
            .collect();
        if set.len() > 1 {
            out.push(set);
        }
    }
    out
}

/// Each circle of `krate`: its room and members (`host-backend crate: a b c`), and the
/// uses among them.
fn report(krate: &str) -> Vec<(String, String)> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join(krate)
        .join("src");
    let mut found = Vec::new();
    for (parent, graph) in sibling_edges(&src) {
        for circle in circles(&graph) {
            let room = if parent.is_empty() {
                "crate".to_owned()
            } else {
                parent.join("::")
            };
            let members: Vec<&str> = circle.iter().map(String::as_str).collect();
            let uses: Vec<String> = circle
                .iter()
                .map(|m| {
                    let to: Vec<&String> =
                        graph[m].iter().filter(|t| circle.contains(*t)).collect();
                    format!("{m} -> {to:?}")
                })
                .collect();
            found.push((
                format!("{krate} {room}: {}", members.join(" ")),
                uses.join("; "),
            ));
        }
    }
    found
}

/// No crate has an import circle among sibling modules: each room's modules stand in
/// layers. A circle fails naming its members and the uses between them.
#[test]
fn no_crate_has_an_import_circle() {
    let found: Vec<(String, String)> = ["wire", "host-backend", "guest-lib", "vmm-glue"]
        .iter()
        .flat_map(|k| report(k))
        .collect();
    let shown: Vec<String> = found
        .iter()
        .map(|(c, uses)| format!("{c}\n    {uses}"))
        .collect();
    assert!(shown.is_empty(), "import circles:\n{}", shown.join("\n"));
}

#[test]
fn the_checker_finds_a_circle_and_resolves_paths() {
    let known: BTreeSet<ModPath> = [
        vec![],
        vec!["a".into()],
        vec!["a".into(), "b".into()],
        vec!["c".into()],
    ]
    .into_iter()
    .collect();
    let p = |s: &str| s.split("::").map(str::to_owned).collect::<Vec<_>>();
    assert_eq!(
        resolve(&p("a::b"), &p("super::super::c::Item"), &known),
        Some(p("c"))
    );
    assert_eq!(
        resolve(&p("a::b"), &p("crate::a::b::f"), &known),
        Some(p("a::b"))
    );
    assert_eq!(resolve(&p("c"), &p("std::io"), &known), None);
    let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    g.entry("x".into()).or_default().insert("y".into());
    g.entry("y".into()).or_default().insert("z".into());
    assert!(circles(&g).is_empty());
    g.entry("z".into()).or_default().insert("x".into());
    assert_eq!(
        circles(&g),
        vec![["x", "y", "z"].iter().map(|s| s.to_string()).collect()]
    );
}

/// The checked ranges at the executor seam live below the session (so the executor
/// does not import it) but only the session makes them: no module of host-backend
/// outside `session/` calls their constructors (their own file and tests aside).
#[test]
fn only_the_session_makes_checked_ranges() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../host-backend/src");
    let mut makers = Vec::new();
    for (module, file) in module_files(&src) {
        if module.first().is_some_and(|m| m == "session") || module == ["executor", "checked"] {
            continue;
        }
        let text = std::fs::read_to_string(&file).expect("read a source file");
        let parsed = syn::parse_file(&text).expect("parses");
        let mut calls = Constructors::default();
        calls.visit_file(&parsed);
        makers.extend(calls.0.iter().map(|c| format!("{}: {c}", file.display())));
    }
    assert!(
        makers.is_empty(),
        "checked ranges made outside the session: {makers:?}"
    );
    // The visitor does see such a call.
    let mut calls = Constructors::default();
    calls.visit_file(&syn::parse_file("fn f() { let _ = DeviceRange::new(1, 2); }").unwrap());
    assert_eq!(calls.0, vec!["DeviceRange::new".to_owned()]);
}

/// Every `DeviceRange::new` or `PitchedRange::new` path a file names, test code left
/// out.
#[derive(Default)]
struct Constructors(Vec<String>);

impl<'ast> Visit<'ast> for Constructors {
    fn visit_item_mod(&mut self, m: &'ast syn::ItemMod) {
        if !is_test_only(&m.attrs) {
            syn::visit::visit_item_mod(self, m);
        }
    }

    fn visit_item_fn(&mut self, f: &'ast syn::ItemFn) {
        if !is_test_only(&f.attrs) {
            syn::visit::visit_item_fn(self, f);
        }
    }

    fn visit_impl_item_fn(&mut self, f: &'ast syn::ImplItemFn) {
        if !is_test_only(&f.attrs) {
            syn::visit::visit_impl_item_fn(self, f);
        }
    }

    fn visit_path(&mut self, p: &'ast syn::Path) {
        let segs: Vec<String> = p.segments.iter().map(|s| s.ident.to_string()).collect();
        if let [.., ty, f] = &segs[..] {
            if (ty == "DeviceRange" || ty == "PitchedRange") && f == "new" {
                self.0.push(format!("{ty}::{f}"));
            }
        }
        syn::visit::visit_path(self, p);
    }
}
