//! Layers that only point down: no import circle between the modules of any crate of the
//! workspace, small ones included.
//!
//! Every source file of a library crate is one module. A module depends on another when its code
//! names a path into it (`use crate::a::b`, `crate::a::f()`, `super::x`, `self::y`, braces
//! expanded), comments and string literals left out. A re-export (`pub use a::B`) is a second
//! name, not a dependency: a path to `B` through it counts as a path into `a`. A parent
//! that only declares its children (`mod x;`) does not depend on them. Test code (`tests.rs`,
//! `*_tests.rs`, a `tests/` folder, `#[cfg(test)] mod … { }`) may use any part of its crate and
//! is left out. The test fails on the
//! first circle it finds and names every file on it, with the names each takes from the next.

#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The library crates of the workspace, by the folder that holds their `lib.rs`.
const CRATES: &[&str] =
    &["protocol/src", "node/memory/src", "node/agent/src", "node/src", "management/src", "tests/src"];

/// One module: its path from the crate root (`["agent", "run"]`) and its file.
#[derive(Debug)]
struct Module {
    path: Vec<String>,
    file: PathBuf,
}

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

/// The modules of the library crate rooted at `src`: every `.rs` file but the binaries'.
fn modules(src: &Path) -> Vec<Module> {
    let mut found = Vec::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let rel = path.strip_prefix(src).unwrap();
            let name = rel.file_name().map_or(String::new(), |n| n.to_string_lossy().into_owned());
            let test_code = name == "tests.rs" || name.ends_with("_tests.rs") || rel.iter().any(|p| p == "tests");
            if rel.starts_with("bin") || rel == Path::new("main.rs") || test_code {
                continue;
            }
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let mut parts: Vec<String> = rel.iter().map(|p| p.to_string_lossy().into_owned()).collect();
                let last = parts.pop().unwrap();
                match last.as_str() {
                    "lib.rs" | "mod.rs" => {}
                    file => parts.push(file.trim_end_matches(".rs").to_string()),
                }
                found.push(Module { path: parts, file: path });
            }
        }
    }
    found
}

/// The code of a file without comments, string and char literals (replaced by spaces, so a
/// path in a doc comment or an error message is no dependency).
fn code_of(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < bytes.len() {
        let rest = &text[i..];
        if rest.starts_with("//") {
            let end = rest.find('\n').map_or(text.len(), |n| i + n);
            i = end;
        } else if rest.starts_with("/*") {
            let end = rest.find("*/").map_or(text.len(), |n| i + n + 2);
            out.push(' ');
            i = end;
        } else if let Some(after) = raw_string_start(rest) {
            let (hashes, open) = after;
            let closing = format!("\"{}", "#".repeat(hashes));
            let end = rest[open..].find(&closing).map_or(text.len(), |n| i + open + n + closing.len());
            out.push_str("\"\"");
            i = end;
        } else if bytes[i] == b'"' {
            let mut j = i + 1;
            while j < bytes.len() && bytes[j] != b'"' {
                j += if bytes[j] == b'\\' { 2 } else { 1 };
            }
            out.push_str("\"\"");
            i = j + 1;
        } else if bytes[i] == b'\'' && is_char_literal(&bytes[i..]) {
            let mut j = i + 1;
            while j < bytes.len() && bytes[j] != b'\'' {
                j += if bytes[j] == b'\\' { 2 } else { 1 };
            }
            out.push_str("' '");
            i = j + 1;
        } else {
            let c = rest.chars().next().unwrap();
            out.push(c);
            i += c.len_utf8();
        }
    }
    out
}

/// `r"…"`, `r#"…"#`, `br"…"`: the number of hashes and where the content starts.
fn raw_string_start(rest: &str) -> Option<(usize, usize)> {
    let body = rest.strip_prefix("br").or_else(|| rest.strip_prefix('r'))?;
    let hashes = body.len() - body.trim_start_matches('#').len();
    body[hashes..].starts_with('"').then(|| (hashes, rest.len() - body.len() + hashes + 1))
}

/// A quote that opens a char literal (`'a'`, `'\n'`, `'\u{1F600}'`), not a lifetime (`'a`).
fn is_char_literal(bytes: &[u8]) -> bool {
    match bytes.get(1) {
        Some(b'\\') => true,
        Some(_) => {
            let s = std::str::from_utf8(&bytes[1..bytes.len().min(6)]).unwrap_or("");
            s.chars().nth(1) == Some('\'')
        }
        None => false,
    }
}

/// Expands `a::{b, c::{d, e as f}}` into `a::b`, `a::c::d`, `a::c::e` (`as` names dropped).
fn expand(tree: &str) -> Vec<String> {
    expand_named(tree).into_iter().map(|(path, _)| path).collect()
}

/// [`expand`], with the name each path is brought in under (`f` for `e as f`).
fn expand_named(tree: &str) -> Vec<(String, String)> {
    let tree = tree.trim();
    let Some(open) = tree.find('{') else {
        let mut parts = tree.split(" as ");
        let path = parts.next().unwrap_or(tree).trim().to_string();
        let name =
            parts.next().map_or_else(|| path.rsplit("::").next().unwrap_or("").to_string(), |n| n.trim().to_string());
        return vec![(path, name)];
    };
    let prefix = &tree[..open];
    let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
    let mut parts = Vec::new();
    let (mut depth, mut start) = (0, 0);
    for (i, c) in inner.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&inner[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&inner[start..]);
    parts
        .into_iter()
        .filter(|p| !p.trim().is_empty())
        .flat_map(|p| expand_named(p).into_iter().map(|(tail, name)| (format!("{prefix}{tail}"), name)))
        .collect()
}

/// The code of a file split by inline modules (`mod tests { … }`): each region's module path
/// below the file's own, and its text without the inline modules inside it.
fn regions(code: &str) -> Vec<(Vec<String>, String)> {
    let mut found = Vec::new();
    let mut outer = String::with_capacity(code.len());
    let mut rest = code;
    while let Some(at) = find_keyword(rest, "mod") {
        let after = &rest[at + 3..];
        let name_len = after.trim_start().find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(0);
        let name = after.trim_start()[..name_len].to_string();
        let follows = after.trim_start()[name_len..].trim_start();
        if name.is_empty() || !follows.starts_with('{') {
            outer.push_str(&rest[..at + 3]);
            rest = after;
            continue;
        }
        let open = rest.len() - follows.len();
        let mut depth = 0usize;
        let mut close = rest.len();
        for (i, c) in rest[open..].char_indices() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        close = open + i;
                        break;
                    }
                }
                _ => {}
            }
        }
        outer.push_str(&rest[..at]);
        // Test code may lean on the whole crate: it is no layer of it.
        if !rest[..at].trim_end().ends_with("#[cfg(test)]") {
            for (mut path, text) in regions(&rest[(open + 1).min(close)..close]) {
                path.insert(0, name.clone());
                found.push((path, text));
            }
        }
        rest = &rest[(close + 1).min(rest.len())..];
    }
    outer.push_str(rest);
    found.insert(0, (Vec::new(), outer));
    found
}

/// Every path the code names (`crate::…`, `super::…`, `self::…`, `child::…`, `std::…`: which
/// of them lead to a module of the crate is for [`resolve`] to say).
fn paths_in(code: &str) -> Vec<String> {
    uses(code).0
}

/// The paths `code` uses, and what it re-exports (`pub use a::b as c`: `(c, a::b)`). A
/// re-export is a name for another module's item, no dependency of the module that gives it:
/// a path to it is followed to where the item lives.
fn uses(code: &str) -> (Vec<String>, Vec<(String, String)>) {
    let mut paths = Vec::new();
    let mut reexports = Vec::new();
    let mut kept = String::with_capacity(code.len());
    // `use` trees, braces included.
    let mut rest = code;
    while let Some(at) = find_keyword(rest, "use") {
        let tail = &rest[at + 3..];
        let end = tail.find(';').unwrap_or(tail.len());
        let before = rest[..at].trim_end();
        let public = before.ends_with("pub")
            || (before.ends_with(')') && before.rfind("pub(").is_some_and(|p| !before[p..].contains('\n')));
        if public {
            reexports.extend(expand_named(&tail[..end]).into_iter().map(|(path, name)| (name, path)));
            kept.push_str(&rest[..at]);
        } else {
            paths.extend(expand(&tail[..end]));
            kept.push_str(&rest[..at + 3 + end]);
        }
        rest = &tail[end..];
    }
    kept.push_str(rest);
    let code = kept.as_str();
    // Paths inline in the code: `a::b` where `a` starts no longer path (`x::a::b`).
    let bytes = code.as_bytes();
    let mut from = 0;
    while let Some(n) = code[from..].find("::") {
        let colons = from + n;
        from = colons + 2;
        let start = code[..colons].rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).map_or(0, |p| p + 1);
        if start == colons || (start > 0 && bytes[start - 1] == b':') {
            continue;
        }
        let end = code[start..]
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
            .map_or(code.len(), |e| start + e);
        paths.push(code[start..end].trim_end_matches(':').to_string());
        from = from.max(end);
    }
    (paths, reexports)
}

fn find_keyword(text: &str, word: &str) -> Option<usize> {
    let bytes = text.as_bytes();
    let mut from = 0;
    while let Some(n) = text[from..].find(word) {
        let at = from + n;
        let before = at == 0 || !(bytes[at - 1].is_ascii_alphanumeric() || bytes[at - 1] == b'_');
        let after = bytes.get(at + word.len()).is_some_and(|c| c.is_ascii_whitespace());
        if before && after {
            return Some(at);
        }
        from = at + word.len();
    }
    None
}

/// The module a path names from inside `here`: the longest prefix that is a module, and the
/// name it takes from it.
fn resolve(path: &str, here: &[String], known: &BTreeSet<Vec<String>>) -> Option<(Vec<String>, String)> {
    let mut segments = path.split("::").map(str::trim).filter(|s| !s.is_empty()).peekable();
    let mut at: Vec<String> = match segments.peek().copied() {
        Some("crate") => {
            segments.next();
            Vec::new()
        }
        Some("super" | "self") => here.to_vec(),
        // A path from a child module of this one (`use sync::Synced` in `node`).
        Some(first) if known.contains(&[here, &[first.to_string()]].concat()) => here.to_vec(),
        _ => return None,
    };
    while let Some(&s) = segments.peek() {
        match s {
            "super" => {
                at.pop()?;
            }
            "self" => {}
            _ => break,
        }
        segments.next();
    }
    let rest: Vec<&str> = segments.collect();
    let mut best = at.clone();
    let mut name = rest.first().map_or("*", |s| s).to_string();
    for (i, s) in rest.iter().enumerate() {
        let mut next = best.clone();
        next.push((*s).to_string());
        if known.contains(&next) {
            best = next;
            name = rest.get(i + 1).map_or("*", |s| s).to_string();
        } else {
            break;
        }
    }
    Some((best, name))
}

/// The module graph of one crate: for each module, the modules it names and what it takes.
type Graph = BTreeMap<Vec<String>, BTreeMap<Vec<String>, BTreeSet<String>>>;

fn graph(src: &Path) -> (Graph, BTreeMap<Vec<String>, PathBuf>) {
    let modules = modules(src);
    let known: BTreeSet<Vec<String>> = modules.iter().map(|m| m.path.clone()).collect();
    let mut graph = Graph::new();
    let mut files = BTreeMap::new();
    // The regions of every file, and where each re-exported name really lives.
    let mut read = Vec::new();
    let mut aliases: BTreeMap<(Vec<String>, String), (Vec<String>, String)> = BTreeMap::new();
    for module in &modules {
        let code = code_of(&std::fs::read_to_string(&module.file).unwrap());
        for (inner, text) in regions(&code) {
            let here: Vec<String> = module.path.iter().cloned().chain(inner).collect();
            let (paths, reexports) = uses(&text);
            for (alias, path) in reexports {
                if let Some(target) = resolve(&path, &here, &known) {
                    aliases.insert((here.clone(), alias), target);
                }
            }
            read.push((module.path.clone(), here, paths));
        }
        files.insert(module.path.clone(), module.file.clone());
    }
    for (module, here, paths) in read {
        let edges = graph.entry(module.clone()).or_default();
        for path in paths {
            let Some(mut target) = resolve(&path, &here, &known) else { continue };
            for _ in 0..8 {
                match aliases.get(&target) {
                    Some(next) => target = next.clone(),
                    None => break,
                }
            }
            if target.0 != module {
                edges.entry(target.0).or_default().insert(target.1);
            }
        }
    }
    (graph, files)
}

/// The circles of `graph`: each group of modules that reach one another (Tarjan's strongly
/// connected components of more than one module), as one circle through them, in order.
fn circles(graph: &Graph) -> Vec<Vec<Vec<String>>> {
    struct Walk<'g> {
        graph: &'g Graph,
        index: BTreeMap<&'g Vec<String>, usize>,
        low: BTreeMap<&'g Vec<String>, usize>,
        stack: Vec<&'g Vec<String>>,
        on_stack: BTreeSet<&'g Vec<String>>,
        groups: Vec<Vec<&'g Vec<String>>>,
    }
    impl<'g> Walk<'g> {
        fn visit(&mut self, node: &'g Vec<String>) {
            let n = self.index.len();
            self.index.insert(node, n);
            self.low.insert(node, n);
            self.stack.push(node);
            self.on_stack.insert(node);
            for next in self.graph.get(node).into_iter().flat_map(BTreeMap::keys) {
                if !self.index.contains_key(next) {
                    self.visit(next);
                    let low = self.low[node].min(self.low[next]);
                    self.low.insert(node, low);
                } else if self.on_stack.contains(next) {
                    let low = self.low[node].min(self.index[next]);
                    self.low.insert(node, low);
                }
            }
            if self.low[node] == self.index[node] {
                let mut group = Vec::new();
                while let Some(top) = self.stack.pop() {
                    self.on_stack.remove(top);
                    group.push(top);
                    if top == node {
                        break;
                    }
                }
                if group.len() > 1 {
                    self.groups.push(group);
                }
            }
        }
    }
    let mut walk = Walk {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        groups: Vec::new(),
    };
    for node in graph.keys() {
        if !walk.index.contains_key(node) {
            walk.visit(node);
        }
    }
    walk.groups.into_iter().map(|group| circle_through(graph, &group)).collect()
}

/// One circle through the first module of a strongly connected `group`: the shortest way back
/// to it, found breadth first inside the group.
fn circle_through(graph: &Graph, group: &[&Vec<String>]) -> Vec<Vec<String>> {
    if std::env::var_os("LAYERS_GROUPS").is_some() {
        eprintln!("group of {}: {:?}", group.len(), group);
    }
    let inside: BTreeSet<&Vec<String>> = group.iter().copied().collect();
    let start = group[0];
    let mut came_from: BTreeMap<&Vec<String>, &Vec<String>> = BTreeMap::new();
    let mut queue = std::collections::VecDeque::from([start]);
    while let Some(node) = queue.pop_front() {
        for next in graph.get(node).into_iter().flat_map(BTreeMap::keys) {
            if next == start {
                let mut path = vec![node.clone()];
                let mut at = node;
                while at != start {
                    at = came_from[at];
                    path.push(at.clone());
                }
                path.reverse();
                return path;
            }
            if inside.contains(next) && !came_from.contains_key(next) {
                came_from.insert(next, node);
                queue.push_back(next);
            }
        }
    }
    group.iter().map(|m| (*m).clone()).collect()
}

#[test]
fn no_crate_has_an_import_circle() {
    let root = workspace();
    let mut found_circles = Vec::new();
    for src in CRATES {
        let (graph, files) = graph(&root.join(src));
        assert!(graph.len() > 1, "{src}: found no modules");
        for found in circles(&graph) {
            let mut lines = vec![format!("{src}: a circle through {} modules:", found.len())];
            for (i, module) in found.iter().enumerate() {
                let next = &found[(i + 1) % found.len()];
                let taken = &graph[module][next];
                let file = files[module].strip_prefix(&root).unwrap().display().to_string();
                let to = files[next].strip_prefix(&root).unwrap().display().to_string();
                lines.push(format!("  {file} -> {to}: {}", taken.iter().cloned().collect::<Vec<_>>().join(", ")));
            }
            found_circles.push(lines.join("\n"));
        }
    }
    assert!(found_circles.is_empty(), "import circles:\n{}", found_circles.join("\n"));
}

#[test]
fn the_checker_finds_a_circle_and_reads_paths_as_rust_does() {
    let paths: BTreeSet<String> = paths_in(&code_of(
        "use crate::a::{b, c::{D, E as F}};\n// use crate::commented;\nfn f() { let s = \"crate::in_string\"; \
         super::g::h(); self::k::L; r#\"crate::raw\"#; let c = 'x'; x::y(); }",
    ))
    .into_iter()
    .collect();
    for expected in ["crate::a::b", "crate::a::c::D", "crate::a::c::E", "super::g::h", "self::k::L", "x::y"] {
        assert!(paths.contains(expected), "{expected} in {paths:?}");
    }
    assert!(
        !paths.iter().any(|p| p.contains("commented") || p.contains("in_string") || p.contains("raw")),
        "{paths:?}"
    );

    let inline = regions("use super::X; mod inner { use super::*; mod deep { fn f() {} } } fn g() {}");
    assert_eq!(inline.len(), 3, "{inline:?}");
    assert_eq!(inline[1].0, ["inner"]);
    assert_eq!(inline[2].0, ["inner", "deep"]);
    assert!(inline[0].1.contains("fn g") && !inline[0].1.contains("super::*"), "{inline:?}");
    let tests = regions("fn g() {}\n#[cfg(test)]\nmod tests { use crate::anything; }");
    assert_eq!(tests.len(), 1, "test code is left out: {tests:?}");

    let known: BTreeSet<Vec<String>> =
        [vec![], vec!["a".to_string()], vec!["a".to_string(), "c".to_string()]].into_iter().collect();
    let here = vec!["a".to_string(), "c".to_string()];
    assert_eq!(resolve("super::X", &here, &known), Some((vec!["a".to_string()], "X".to_string())));
    assert_eq!(resolve("crate::a::c::Y", &[], &known), Some((here.clone(), "Y".to_string())));
    assert_eq!(resolve("std::io", &here, &known), None);
    assert_eq!(resolve("c::Z", &["a".to_string()], &known), Some((here.clone(), "Z".to_string())), "a child's path");

    let mut graph = Graph::new();
    let edge = |to: &str| BTreeMap::from([(vec![to.to_string()], BTreeSet::from(["x".to_string()]))]);
    graph.insert(vec!["a".into()], edge("b"));
    graph.insert(vec!["b".into()], edge("c"));
    graph.insert(vec!["c".into()], BTreeMap::new());
    assert!(circles(&graph).is_empty(), "a chain is no circle");
    graph.insert(vec!["c".into()], edge("a"));
    let found = circles(&graph);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].len(), 3, "a -> b -> c -> a is one: {found:?}");
}
