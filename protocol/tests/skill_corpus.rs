//! The scanner against a corpus of skill folders (`tests/skills/` at the repository's root):
//! every folder under `hostile/` holds a payload, named by the rule that must find it before
//! `--` in the folder's name, and is refused; no folder under `benign/` is.

use std::path::{Path, PathBuf};

use druse_protocol::scan::{self, Severity};

fn corpus(kind: &str) -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/skills").join(kind);
    let mut cases: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("entry").path())
        .filter(|p| p.is_dir())
        .collect();
    cases.sort();
    cases
}

/// A folder's files as the scanner takes them: `SKILL.md` first, then the rest by path.
fn files(dir: &Path) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).expect("read_dir") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                stack.push(path);
            } else {
                let rel = path.strip_prefix(dir).expect("inside").to_string_lossy().replace('\\', "/");
                out.push((rel, std::fs::read_to_string(&path).expect("utf-8 text")));
            }
        }
    }
    out.sort_by(|a, b| (a.0 != "SKILL.md", &a.0).cmp(&(b.0 != "SKILL.md", &b.0)));
    out
}

fn report(dir: &Path) -> scan::Report {
    let files = files(dir);
    let borrowed: Vec<(&str, &str)> = files.iter().map(|(p, t)| (p.as_str(), t.as_str())).collect();
    scan::scan(&borrowed, &[])
}

#[test]
fn every_hostile_skill_is_refused_by_the_rule_its_name_gives() {
    let cases = corpus("hostile");
    assert!(cases.len() >= 30, "the corpus holds {} hostile skills", cases.len());
    let mut wrong = Vec::new();
    for dir in &cases {
        let name = dir.file_name().expect("name").to_string_lossy().into_owned();
        let rule = name.split("--").next().expect("a rule");
        let report = report(dir);
        let found = report.findings.iter().any(|f| f.rule == rule && f.severity == Severity::High);
        if !found {
            wrong.push(format!("{name}: {:?}", report.findings));
        }
    }
    assert!(wrong.is_empty(), "not refused by their rule:\n{}", wrong.join("\n"));
}

#[test]
fn no_benign_skill_is_refused() {
    let cases = corpus("benign");
    assert!(cases.len() >= 30, "the corpus holds {} benign skills", cases.len());
    let refused: Vec<String> = cases
        .iter()
        .filter_map(|dir| {
            let report = report(dir);
            report.refused().then(|| format!("{}: {:?}", dir.display(), report.first_high()))
        })
        .collect();
    assert!(refused.is_empty(), "refused:\n{}", refused.join("\n"));
}
