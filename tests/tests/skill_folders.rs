#![allow(clippy::unwrap_used)]
//! Agent Skills folders across the swarm: a folder imported with `druse-node skill import` on
//! one node is gossiped and exported by another as the same folder (the same files, the same
//! digest); a hostile folder is refused at import, naming its rule, file and line; a hostile
//! folder a raw peer publishes anyway, or one whose files do not have the digest its listing
//! states, is refused by every receiving node and counted by rule; and a management reviewer
//! sees a skill's findings before it endorses.

use std::path::{Path, PathBuf};

use druse_node::Role;
use druse_protocol::body::{Body, CrystalListing, EndorsementVerdict};
use druse_protocol::skill_folder::Folder;
use druse_protocol::topic;
use druse_tests::process::{ProcNode, binaries, run_cli, trio};
use druse_tests::swarm::{Cluster, TestNode, connect, content_id, key, mesh_ready, mgmt_key, publish_raw, seal};
use druse_tests::{WAIT, eventually, wait_for};

fn corpus(kind: &str, name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("skills").join(kind).join(name)
}

/// Every file under `dir`, by its `/`-separated path inside it.
fn files(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else {
                let rel = path.strip_prefix(dir).unwrap().to_string_lossy().replace('\\', "/");
                out.push((rel, std::fs::read(&path).unwrap()));
            }
        }
    }
    out.sort();
    out
}

/// Copies `from` into `to`, adding `extra` files.
fn copy_folder(from: &Path, to: &Path, extra: &[(&str, &str)]) {
    for (rel, bytes) in files(from) {
        let path = to.join(&rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, bytes).unwrap();
    }
    for (rel, text) in extra {
        let path = to.join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
}

/// A listing that carries `folder` as an import publishes it.
fn folder_listing(folder: &Folder) -> CrystalListing {
    let mut listing = druse_tests::swarm::listing(&folder.frontmatter().name);
    listing.text = folder.to_listing_text();
    listing
}

#[tokio::test(flavor = "multi_thread")]
async fn import_on_one_node_gossip_and_export_on_another_give_the_same_folder() {
    let bins = tokio::task::spawn_blocking(binaries).await.unwrap().unwrap();
    let root = tempfile::tempdir().unwrap();
    let (mgmt_dir, a_dir, b_dir) = (root.path().join("mgmt"), root.path().join("a"), root.path().join("b"));
    mgmt_key().save(&mgmt_dir.join("node.key")).unwrap();
    key(1).save(&a_dir.join("node.key")).unwrap();
    key(2).save(&b_dir.join("node.key")).unwrap();
    let trust_list = root.path().join("trust.list");
    std::fs::write(&trust_list, format!("{}  # druse-mgmt\n", mgmt_key().public())).unwrap();
    let [mgmt, a, b] = trio(bins, [&mgmt_dir, &a_dir, &b_dir], &trust_list).await.unwrap();
    let logs = || [&mgmt, &a, &b].map(|n| n.process.log_tail()).join("\n");

    // A corpus folder with a reference that links off the allow list: a medium finding, kept
    // for the reviewer.
    let original = root.path().join("in").join("with-reference");
    copy_folder(
        &corpus("benign", "with-reference"),
        &original,
        &[("references/links.md", "See https://tz.example.net/rules for the table.\n")],
    );
    let flags = a.cli_flags();
    let mut args = vec!["skill", "import", original.to_str().unwrap(), "--price", "1500"];
    args.extend(flags.iter().map(String::as_str));
    let imported: serde_json::Value = serde_json::from_str(&run_cli(&bins.node, &args).await.unwrap()).unwrap();
    let id = imported["content_id"].as_str().unwrap().to_owned();
    let digest = imported["digest"].as_str().unwrap().to_owned();
    let expected = Folder::new(files(&original), Some("with-reference")).unwrap();
    assert_eq!(digest, expected.digest(), "the import's digest is the folder's");
    let findings = imported["findings"].as_array().unwrap();
    assert!(
        findings.iter().any(|f| f["rule"] == "url" && f["file"] == "references/links.md" && f["line"] == 1),
        "{imported}"
    );

    let crystal = format!("/v1/crystals/{id}");
    for node in [&mgmt, &b] {
        eventually(WAIT, format_args!("{} to store the imported skill", node.process.name), async || {
            node.get_json(&crystal).await.is_ok_and(|c| c.is_some())
        })
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", logs()));
    }

    // b exports it: the same files, SKILL.md with b's view of its provenance in `metadata`.
    let out = root.path().join("out");
    let written = b.cli(&bins.node, &["skill", "export", &id, out.to_str().unwrap()]).await.unwrap();
    let exported_dir = out.join("with-reference");
    assert_eq!(written.trim(), exported_dir.display().to_string());
    let exported = files(&exported_dir);
    let source = files(&original);
    assert_eq!(exported.iter().map(|(p, _)| p).collect::<Vec<_>>(), source.iter().map(|(p, _)| p).collect::<Vec<_>>());
    for ((path, out_bytes), (_, in_bytes)) in exported.iter().zip(&source) {
        if path != "SKILL.md" {
            assert_eq!(out_bytes, in_bytes, "{path} is byte-identical");
        }
    }
    let skill_md = String::from_utf8(exported[0].1.clone()).unwrap();
    for line in [
        format!("druse-id: \"{id}\""),
        format!("druse-digest: \"{digest}\""),
        format!("druse-publisher: \"{}\"", key(1).public()),
        "druse-asking-price: \"1500\"".into(),
        "medium `url` in references/links.md line 1".into(),
    ] {
        assert!(skill_md.contains(&line), "{line} missing from b's export:\n{skill_md}");
    }
    let again = Folder::new(exported, Some("with-reference")).unwrap();
    assert_eq!(again.files(), expected.files(), "the export imports as the original folder");
    assert_eq!(again.digest(), digest);

    // The reviewer sees the finding before endorsing.
    let endorsed = cli_ok(&bins.mgmt, &["endorse", &id, "--note", "reviewed"], &mgmt).await;
    assert!(endorsed.contains("finding: medium `url` in references/links.md line 1"), "{endorsed}");

    // A hostile folder is refused at import, naming the rule, the file and the line.
    let hostile = root.path().join("in").join("in-script-file");
    copy_folder(&corpus("hostile", "remote-exec--in-script-file"), &hostile, &[]);
    let mut args = vec!["skill", "import", hostile.to_str().unwrap()];
    args.extend(flags.iter().map(String::as_str));
    let refused = run_cli(&bins.node, &args).await.expect_err("a hostile folder is refused");
    let refused = format!("{refused:#}");
    assert!(refused.contains("`remote-exec` in scripts/lint.sh line"), "{refused}");

    // A folder that breaks the format is refused before anything reaches the node.
    let misnamed = root.path().join("in").join("other-name");
    copy_folder(&corpus("benign", "scripted-build"), &misnamed, &[]);
    let mut args = vec!["skill", "import", misnamed.to_str().unwrap()];
    args.extend(flags.iter().map(String::as_str));
    let refused = format!("{:#}", run_cli(&bins.node, &args).await.expect_err("misnamed"));
    assert!(refused.contains("SKILL.md field `name`"), "{refused}");

    for mut node in [b, a, mgmt] {
        assert!(node.process.terminate().await.unwrap().success(), "{}", node.process.log_tail());
    }
}

async fn cli_ok(program: &Path, args: &[&str], node: &ProcNode) -> String {
    node.cli(program, args).await.unwrap_or_else(|e| panic!("{e:#}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_hostile_folder_from_a_raw_peer_is_refused_by_every_node_and_counted_by_rule() {
    let cluster = Cluster::start(&[("a", 1), ("b", 2)], |_| {}).await.unwrap();
    let rogue = TestNode::start("rogue", 66, Role::Edge, &[mgmt_key().public()], |_| {}).await.unwrap();
    for node in cluster.nodes() {
        connect(rogue.net(), node.net()).await.unwrap();
    }
    let mut all = cluster.nodes();
    all.push(&rogue);
    mesh_ready(&all).await.unwrap();

    // The payload sits in a script file: the listing's text holds it only inside the folder.
    let hostile = Folder::new(files(&corpus("hostile", "remote-exec--in-script-file")), None).unwrap();
    let body = Body::Crystal(folder_listing(&hostile));
    let hostile_id = content_id(&body).unwrap();
    publish_raw(rogue.net(), topic::CRYSTALS, seal(&key(66), &body).unwrap()).await.unwrap();
    // A folder whose files were changed after its digest was stated.
    let benign = Folder::new(files(&corpus("benign", "scripted-build")), None).unwrap();
    let mut tampered = folder_listing(&benign);
    tampered.text = tampered.text.replacen("Builds", "Breaks", 1);
    let tampered = Body::Crystal(tampered);
    let tampered_id = content_id(&tampered).unwrap();
    publish_raw(rogue.net(), topic::CRYSTALS, seal(&key(66), &tampered).unwrap()).await.unwrap();
    // And an honest folder, which every node stores.
    let honest = Body::Crystal(folder_listing(&benign));
    let honest_id = content_id(&honest).unwrap();
    publish_raw(rogue.net(), topic::CRYSTALS, seal(&key(66), &honest).unwrap()).await.unwrap();

    for node in cluster.nodes() {
        let refused =
            |rule: &str| node.metric("druse_ingest_refused_total", &[("label", "skill_scan"), ("rule", rule)]);
        eventually(WAIT, format_args!("{} to refuse both and store the honest folder", node.name), async || {
            refused("remote-exec") >= 1.0 && refused("skill-folder") >= 1.0 && node.has_skill(&honest_id)
        })
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", node.metrics_text()));
        assert!(!node.has_skill(&hostile_id), "{} stored the hostile folder", node.name);
        assert!(!node.has_skill(&tampered_id), "{} stored the tampered folder", node.name);
    }

    // The reviewer's view: an honest folder has no finding, and endorsing it answers that.
    let (_, findings) = cluster
        .management
        .endorse_reviewed(honest_id, EndorsementVerdict::Endorse, "reviewed".into(), false)
        .await
        .unwrap();
    assert!(findings.is_empty(), "{findings:?}");
    let on_a = wait_for(WAIT, "a to apply the endorsement", async || {
        cluster.edge("a").stored(&honest_id).ok()?.filter(|s| s.is_verified)
    })
    .await
    .unwrap();
    assert_eq!(on_a.verified_by, Some(mgmt_key().public()));
    rogue.stop().await;
    cluster.stop().await;
}

/// An imported folder is an ordinary skill crystal on every node: a peer's agent finds it by
/// the situation it fits, with the query the agent's `[SWARM SKILLS]` block runs (exploration
/// notes, as the node's own agent, without touching access stats), as a peer's skill.
#[tokio::test(flavor = "multi_thread")]
async fn an_imported_folder_is_found_for_the_agents_swarm_skills_on_another_node() {
    use druse_memory::crystal::{MemoryKind, Origin};
    use druse_memory::engine::Query;
    use druse_memory::governance::Caller;

    let cluster = Cluster::start(&[("a", 1), ("b", 2)], |_| {}).await.unwrap();
    let (a, b) = (cluster.edge("a"), cluster.edge("b"));
    let folder = Folder::new(files(&corpus("benign", "retry-backoff")), Some("retry-backoff")).unwrap();
    let id = a.node.publish(&Body::Crystal(folder_listing(&folder))).await.unwrap();
    let situation = "a network call keeps failing transiently; how long should I wait before trying again?";
    let hit = wait_for(WAIT, "b's memory to find the imported skill for the situation", async || {
        let query = Query { q: situation.into(), k: 12, kind: Some(MemoryKind::ExplorationNote), ..Query::default() };
        let hits = b.node.memory().peek(query, Caller::LocalAgent, druse_protocol::now_ms()).await.ok()?;
        hits.into_iter().find(|h| h.crystal.skill == Some(id))
    })
    .await
    .unwrap();
    assert_eq!(hit.crystal.origin, Origin::Peer, "b holds it as a peer's skill, which the agent lists");
    let stored = b.stored(&id).unwrap().unwrap();
    let carried = Folder::from_listing_text(&stored.listing.text).unwrap().unwrap();
    assert_eq!(carried.digest(), folder.digest());
    cluster.stop().await;
}
