use super::*;

fn skill_md(front: &str) -> String {
    format!("---\n{front}---\n\n# Steps\n\nDo the thing.\n")
}

fn folder(front: &str, extra: &[(&str, &str)]) -> Result<Folder, Error> {
    let mut files = vec![(SKILL_MD.to_owned(), skill_md(front).into_bytes())];
    files.extend(extra.iter().map(|(p, t)| ((*p).to_owned(), t.as_bytes().to_vec())));
    Folder::new(files, Some("retry-backoff"))
}

const FRONT: &str = "name: retry-backoff\ndescription: Retries a flaky call with backoff.\n";

#[test]
fn a_valid_folder_reads_every_field() {
    let front = "name: retry-backoff\ndescription: >\n  Retries a flaky call\n  with backoff.\nlicense: MIT\nallowed-tools: [Bash, Read]\nmetadata:\n  version: \"1.2\"\n  author: 'Ann O''Neil' # who\n";
    let folder = folder(front, &[("scripts/retry.sh", "sleep 1\n")]).expect("valid");
    let fm = folder.frontmatter();
    assert_eq!(fm.name, "retry-backoff");
    assert_eq!(fm.description, "Retries a flaky call with backoff.\n");
    assert_eq!(fm.license.as_deref(), Some("MIT"));
    assert_eq!(fm.allowed_tools.as_deref(), Some("Bash Read"));
    assert_eq!(fm.metadata.get("version").map(String::as_str), Some("1.2"));
    assert_eq!(fm.metadata.get("author").map(String::as_str), Some("Ann O'Neil"));
    assert_eq!(folder.files().iter().map(|f| f.path.as_str()).collect::<Vec<_>>(), ["SKILL.md", "scripts/retry.sh"]);
}

#[test]
fn errors_name_the_field_that_breaks_a_rule() {
    let cases: &[(&str, &str)] = &[
        ("description: d\n", "`name`: missing"),
        ("name: Retry\ndescription: d\n", "`name`"),
        ("name: retry--backoff\ndescription: d\n", "`name`"),
        ("name: retry-backoff\n", "`description`: missing"),
        ("name: retry-backoff\ndescription: \"\"\n", "`description`: must not be empty"),
        ("name: other\ndescription: d\n", "not the folder's name"),
        ("name: retry-backoff\ndescription: d\nversion: 2\n", "`version`: not an Agent Skills field"),
        ("name: retry-backoff\ndescription: d\nmetadata:\n  tags:\n    - a\n", "`metadata.tags`"),
        ("name: retry-backoff\ndescription: \"open\n", "`description`: an unclosed double quote"),
    ];
    for (front, expected) in cases {
        let error = folder(front, &[]).expect_err(front).to_string();
        assert!(error.contains(expected), "{front:?}: {error}");
    }
    let long = format!("name: retry-backoff\ndescription: {}\n", "x".repeat(1025));
    assert!(folder(&long, &[]).expect_err("long").to_string().contains("`description`: 1025 characters"));
    let long_name = format!("name: {}\ndescription: d\n", "a".repeat(65));
    assert!(
        Folder::new(vec![(SKILL_MD.into(), skill_md(&long_name).into_bytes())], None)
            .expect_err("long name")
            .to_string()
            .contains("`name`: 65 characters")
    );
}

#[test]
fn files_are_checked_for_place_size_and_encoding() {
    let err = |extra: &[(&str, &str)]| folder(FRONT, extra).expect_err("refused").to_string();
    assert!(err(&[("notes.txt", "x")]).contains("file notes.txt"));
    assert!(err(&[("scripts/../x", "x")]).contains("file scripts/../x"));
    let big = "x".repeat(caps::FILE + 1);
    assert!(err(&[("assets/big.txt", &big)]).contains("over the cap"));
    let part = "x".repeat(caps::FILE);
    assert!(err(&[("assets/a", &part), ("assets/b", &part)]).contains("bytes of files"));
    let binary = Folder::new(
        vec![(SKILL_MD.into(), skill_md(FRONT).into_bytes()), ("assets/logo.png".into(), vec![0x89, 0x50, 0xff, 0xfe])],
        None,
    );
    assert!(binary.expect_err("binary").to_string().contains("binary files are refused"));
    let no_skill = Folder::new(vec![("scripts/a.sh".into(), b"x".to_vec())], None);
    assert_eq!(no_skill, Err(Error::Folder("no SKILL.md".into())));
    let windows = Folder::new(
        vec![(SKILL_MD.into(), skill_md(FRONT).into_bytes()), ("scripts\\a.sh".into(), b"x".to_vec())],
        None,
    )
    .expect("backslashes read as /");
    assert_eq!(windows.files()[1].path, "scripts/a.sh");
}

#[test]
fn the_digest_is_the_documented_hash_and_ignores_file_order() {
    let a = folder(FRONT, &[("scripts/a.sh", "a"), ("references/b.md", "b")]).expect("a");
    let b = folder(FRONT, &[("references/b.md", "b"), ("scripts/a.sh", "a")]).expect("b");
    assert_eq!(a.digest(), b.digest());
    let mut hash = Sha256::new();
    for (path, text) in [("SKILL.md", skill_md(FRONT)), ("references/b.md", "b".into()), ("scripts/a.sh", "a".into())] {
        hash.update(path.as_bytes());
        hash.update([0]);
        hash.update((text.len() as u64).to_be_bytes());
        hash.update(text.as_bytes());
    }
    assert_eq!(a.digest(), format!("sha256:{}", data_encoding::HEXLOWER.encode(&hash.finalize())));
    let c = folder(FRONT, &[("scripts/a.sh", "a!"), ("references/b.md", "b")]).expect("c");
    assert_ne!(a.digest(), c.digest(), "a changed byte changes the digest");
}

#[test]
fn a_folder_travels_in_a_listing_text_and_a_wrong_digest_is_refused() {
    let folder = folder(FRONT, &[("scripts/a.sh", "echo ok\n"), ("references/r.md", "é -->\n")]).expect("valid");
    let text = folder.to_listing_text();
    assert!(text.len() <= crate::body::limits::TEXT);
    assert_eq!(Folder::from_listing_text(&text), Some(Ok(folder.clone())));
    assert_eq!(Folder::from_listing_text("Skill: a distilled procedure"), None);
    let tampered = text.replace("echo ok", "echo no");
    let error = Folder::from_listing_text(&tampered).expect("framed").expect_err("digest differs").to_string();
    assert!(error.contains("states digest"), "{error}");
    let cut = &text[..text.len() - 3];
    assert!(Folder::from_listing_text(cut).expect("framed").is_err());
}

#[test]
fn export_metadata_is_taken_out_again_byte_for_byte() {
    let with_block = "name: retry-backoff\ndescription: d\nmetadata:\n  version: \"1.2\"\nlicense: MIT\n";
    for front in [FRONT, with_block] {
        let folder = folder(front, &[("scripts/a.sh", "a")]).expect("valid");
        let exported = folder.exported(&[("id", "bafy".into()), ("price", "12".into())]);
        assert!(exported[0].text.contains("  druse-id: \"bafy\"\n"), "{}", exported[0].text);
        let (fm, _) = parse(&exported[0].text).expect("an export is valid");
        assert!(fm.metadata.keys().all(|k| !k.starts_with(DRUSE_KEY)));
        assert_eq!(exported[1..], folder.files()[1..]);
        let again = Folder::from_texts(exported, Some("retry-backoff")).expect("imports");
        assert_eq!(again.files(), folder.files(), "{front}");
        assert_eq!(again.digest(), folder.digest());
    }
}

#[test]
fn a_distilled_procedure_becomes_a_valid_folder() {
    let text = "Skill: Answer a sourdough question\nWhen: someone asks why a starter is flat\nSteps:\n1. search_memory";
    let folder = Folder::from_procedure("Answer a sourdough question!", text).expect("valid");
    assert_eq!(folder.frontmatter().name, "answer-a-sourdough-question");
    assert_eq!(folder.frontmatter().description, "Use when someone asks why a starter is flat");
    assert!(folder.skill_md().ends_with(&format!("\n{text}\n")));
    assert_eq!(slug("  --  "), "skill");
    assert_eq!(slug(&"abc ".repeat(40)).len(), 63, "cut at 64, then the trailing `-`");
}

#[test]
fn every_benign_corpus_folder_is_a_valid_skill_folder() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/skills/benign");
    let mut count = 0;
    for entry in std::fs::read_dir(&root).expect("corpus") {
        let dir = entry.expect("entry").path();
        let name = dir.file_name().and_then(|n| n.to_str()).expect("name").to_owned();
        let mut files = Vec::new();
        let mut stack = vec![dir.clone()];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).expect("dir") {
                let p = e.expect("entry").path();
                if p.is_dir() {
                    stack.push(p);
                } else {
                    let rel = p.strip_prefix(&dir).expect("inside").to_string_lossy().into_owned();
                    files.push((rel, std::fs::read(&p).expect("read")));
                }
            }
        }
        Folder::new(files, Some(&name)).unwrap_or_else(|e| panic!("{name}: {e}"));
        count += 1;
    }
    assert!(count >= 30);
}
