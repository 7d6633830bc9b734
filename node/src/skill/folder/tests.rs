use std::path::Path;

use druse_protocol::Keypair;
use druse_protocol::skill_folder::caps;

use super::*;
use crate::skill::Provenance as Origin;

fn corpus(kind: &str, name: &str) -> Vec<(String, Vec<u8>)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/skills").join(kind).join(name);
    let mut files = Vec::new();
    let mut stack = vec![dir.clone()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).expect("corpus folder") {
            let path = entry.expect("entry").path();
            if path.is_dir() {
                stack.push(path);
            } else {
                let rel = path.strip_prefix(&dir).expect("inside").to_string_lossy().into_owned();
                files.push((rel, std::fs::read(&path).expect("read")));
            }
        }
    }
    files
}

fn stored(listing: CrystalListing) -> Skill {
    let author = Keypair::from_seed([7; 32]).public();
    Skill::new(ContentId::of(listing.text.as_bytes()), listing, author, Origin::Peer, 0)
}

#[test]
fn an_imported_folder_exports_byte_identical_but_for_its_metadata() {
    let folder = Folder::new(corpus("benign", "scripted-build"), Some("scripted-build")).expect("valid");
    let (listing, found) = listing_for(&folder, 250, 1, None, 1000).expect("clean");
    assert!(found.is_empty(), "{found:?}");
    assert_eq!((listing.name.as_str(), listing.skill_id.as_str()), ("scripted-build", "scripted-build"));
    assert!(listing.text.len() <= druse_protocol::body::limits::TEXT);
    let skill = stored(listing);
    let exported = export(&Provenance { skill: &skill, computed_price: 90 }).expect("exports");
    assert_eq!(exported.digest, folder.digest());
    assert_eq!(exported.files[1..], folder.files()[1..], "the other files are byte-identical");
    let md = &exported.files[0].text;
    for line in [
        format!("  druse-id: \"{}\"", skill.id),
        format!("  druse-publisher: \"{}\"", skill.author),
        format!("  druse-digest: \"{}\"", folder.digest()),
        "  druse-asking-price: \"250\"".into(),
        "  druse-price: \"90\"".into(),
        "  druse-version: \"1\"".into(),
        "  druse-endorsement: \"none\"".into(),
    ] {
        assert!(md.contains(&line), "{line} missing from\n{md}");
    }
    let again = Folder::from_texts(exported.files, Some("scripted-build")).expect("the export imports");
    assert_eq!(again.files(), folder.files(), "import → export → import gives the same files");
}

#[test]
fn a_hostile_script_is_refused_at_import_naming_rule_file_and_line() {
    let mut files = corpus("hostile", "remote-exec--in-script-file");
    // The corpus folder's name carries the rule; the skill's own name is `in-script-file`.
    let folder = Folder::new(std::mem::take(&mut files), Some("in-script-file")).expect("a valid folder");
    let error = listing_for(&folder, 0, 1, None, 0).expect_err("refused");
    let Refusal::Scan(located) = &error else { panic!("{error}") };
    assert_eq!(located.finding.rule, "remote-exec");
    assert_eq!(located.finding.file, "scripts/lint.sh");
    assert!(located.line.is_some(), "{located}");
    assert!(error.to_string().contains("`remote-exec` in scripts/lint.sh line"), "{error}");
}

#[test]
fn a_payload_split_across_files_is_refused_as_a_folder() {
    let folder = Folder::new(corpus("hostile", "model-override--split-across-files"), None).expect("valid folder");
    let error = listing_for(&folder, 0, 1, None, 0).expect_err("refused");
    assert!(matches!(&error, Refusal::Scan(l) if l.finding.rule == "model-override"), "{error}");
}

#[test]
fn a_secret_in_a_file_is_refused_as_confidential() {
    let mut files = corpus("benign", "scripted-build");
    files.push(("references/keys.md".into(), b"The deploy password: hunter2\n".to_vec()));
    let folder = Folder::new(files, Some("scripted-build")).expect("valid folder");
    assert_eq!(listing_for(&folder, 0, 1, None, 0), Err(Refusal::Confidential("references/keys.md".into())));
}

#[test]
fn a_listing_that_claims_a_folder_it_does_not_hold_is_a_high_finding() {
    let folder = Folder::new(corpus("benign", "with-reference"), None).expect("valid");
    let (mut listing, _) = listing_for(&folder, 0, 1, None, 0).expect("clean");
    listing.text = listing.text.replace("UTC", "utc");
    let report = scan_listing(&listing);
    assert!(report.refused());
    assert_eq!(report.first_high().map(|f| f.rule.as_str()), Some("skill-folder"));
}

/// A skill record as a node before folders stored it (no `deprecated` or `crystal` field, a
/// distilled procedure as its text) still loads, and exports as a valid folder.
#[test]
fn a_skill_stored_by_an_earlier_version_loads_and_exports() {
    let author = Keypair::from_seed([3; 32]).public();
    let id = ContentId::of(b"old");
    let record = serde_json::json!({
        "id": id,
        "listing": {
            "issued_at": 5, "name": "Answer a sourdough question",
            "text": "Skill: Answer a sourdough question\nWhen: a starter is flat\nSteps:\n1. search_memory",
            "semantic_type": "skill", "tags": [], "category": null, "skill_id": "sourdough", "version": 2,
            "previous_version": null, "stats": {"executions": 3, "successes": 2, "avg_reward": 0.5},
            "asking_price": 10
        },
        "author": author, "author_peer": author.peer_id().to_string(), "origin": "peer",
        "received_at": 9, "is_verified": false, "verified_by": null, "endorsement": null
    });
    let skill: Skill = serde_json::from_value(record).expect("an old record loads");
    let exported = export(&Provenance { skill: &skill, computed_price: 0 }).expect("exports");
    assert_eq!(exported.name, "answer-a-sourdough-question");
    assert_eq!(exported.files.len(), 1);
    let folder = Folder::from_texts(exported.files, Some("answer-a-sourdough-question")).expect("a valid folder");
    assert_eq!(folder.frontmatter().description, "Use when a starter is flat");
    assert_eq!(folder.digest(), exported.digest);
    assert!(folder.skill_md().contains("Skill: Answer a sourdough question\nWhen: a starter is flat"));
}

#[test]
fn the_largest_folder_fits_one_listing() {
    let mut files = corpus("benign", "scripted-build");
    let used: usize = files.iter().map(|(_, b)| b.len()).sum();
    let mut left = caps::TOTAL - used;
    for i in 0..caps::FILES - files.len() {
        let n = left.min(caps::FILE).min(caps::TOTAL / 8);
        files.push((format!("references/{}{i}.md", "r".repeat(caps::PATH - 20)), vec![b'a'; n]));
        left -= n;
    }
    let folder = Folder::new(files, None).expect("at the caps");
    let (listing, _) = listing_for(&folder, 0, 1, None, 0).expect("clean");
    assert!(listing.text.len() <= druse_protocol::body::limits::TEXT, "{}", listing.text.len());
    let body = druse_protocol::Body::Crystal(listing);
    let encoded = body.encode().expect("within the body's caps");
    let envelope = druse_protocol::Envelope::seal(&Keypair::from_seed([1; 32]), body.kind(), &encoded);
    assert!(envelope.len() <= druse_protocol::envelope::MAX_ENVELOPE_LEN, "{}", envelope.len());
}
