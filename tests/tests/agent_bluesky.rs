//! The agent's Bluesky client (atrium-api) against a real local ATProto network: login and
//! the persisted session, notifications (a reply that @-mentions the agent arrives as a
//! mention), threads, replies with root and parent refs, likes, and mention facets with
//! UTF-8 byte offsets resolved through the agent's own PDS.

use std::time::Duration;

use druse_node::agent::Secret;
use druse_node::agent::bluesky::{Bluesky, Error, PostRef, SessionOrigin};
use druse_tests::atproto::{Account, Network, handle, replies};
use druse_tests::{eventually, wait_for};

/// The AppView indexes from the PDS's firehose: a few hundred ms on loopback.
const INDEXED: Duration = Duration::from_secs(20);

async fn agent_account(net: &Network) -> anyhow::Result<(Account, tempfile::TempDir)> {
    let account = Account::create(net, &handle("ag")).await?;
    Ok((account, tempfile::tempdir()?))
}

async fn connect(net: &Network, account: &Account, dir: &tempfile::TempDir) -> Result<(Bluesky, SessionOrigin), Error> {
    Bluesky::connect(&net.pds, &account.handle, &Secret::new(account.password.clone()), dir.path().join("session.json"))
        .await
}

#[tokio::test]
async fn the_session_is_persisted_0600_and_reused() -> anyhow::Result<()> {
    let net = Network::shared().await?;
    let (account, dir) = agent_account(net).await?;
    let (bsky, origin) = connect(net, &account, &dir).await?;
    assert_eq!(origin, SessionOrigin::LoggedIn);
    assert_eq!(bsky.did(), account.did);
    let path = dir.path().join("session.json");
    let mode = std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&path)?.permissions());
    assert_eq!(mode & 0o777, 0o600, "the session file is private");
    let (again, origin) = connect(net, &account, &dir).await?;
    assert_eq!(origin, SessionOrigin::Reused, "a restart reuses the session");
    again.post("still here", Vec::new()).await?;
    // A session whose tokens no longer work is replaced by a new login.
    let text = std::fs::read_to_string(&path)?;
    let broken =
        text.replace("\"accessJwt\":\"", "\"accessJwt\":\"x").replace("\"refreshJwt\":\"", "\"refreshJwt\":\"x");
    assert_ne!(broken, text);
    std::fs::write(&path, broken)?;
    let (_, origin) = connect(net, &account, &dir).await?;
    assert_eq!(origin, SessionOrigin::LoggedIn);
    std::fs::write(&path, "not json")?;
    let (_, origin) = connect(net, &account, &dir).await?;
    assert_eq!(origin, SessionOrigin::LoggedIn, "an unreadable session file is ignored");
    Ok(())
}

/// An access token like `valid` but expired a minute ago, signed as the dev PDS signs its
/// tokens (HS256 with @atproto/dev-env's JWT secret).
fn expired_copy(valid: &str) -> anyhow::Result<String> {
    use data_encoding::BASE64URL_NOPAD;
    use sha2::{Digest, Sha256};
    let payload = valid.split('.').nth(1).ok_or_else(|| anyhow::anyhow!("not a JWT"))?;
    let mut claims: serde_json::Value = serde_json::from_slice(&BASE64URL_NOPAD.decode(payload.as_bytes())?)?;
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.as_secs();
    claims["iat"] = (now - 7200).into();
    claims["exp"] = (now - 60).into();
    let header = serde_json::json!({"typ": "at+jwt", "alg": "HS256"});
    let signing = format!(
        "{}.{}",
        BASE64URL_NOPAD.encode(header.to_string().as_bytes()),
        BASE64URL_NOPAD.encode(claims.to_string().as_bytes())
    );
    // HMAC-SHA256 (RFC 2104) with the dev-env secret, shorter than a block.
    let mut key = [0u8; 64];
    key[..10].copy_from_slice(b"jwt-secret");
    let inner = Sha256::new().chain_update(key.map(|b| b ^ 0x36)).chain_update(signing.as_bytes()).finalize();
    let mac = Sha256::new().chain_update(key.map(|b| b ^ 0x5c)).chain_update(inner).finalize();
    Ok(format!("{signing}.{}", BASE64URL_NOPAD.encode(&mac)))
}

#[tokio::test]
async fn an_expired_access_token_is_refreshed_with_the_refresh_token_not_by_logging_in() -> anyhow::Result<()> {
    let net = Network::shared().await?;
    let (account, dir) = agent_account(net).await?;
    let (_, origin) = connect(net, &account, &dir).await?;
    assert_eq!(origin, SessionOrigin::LoggedIn);
    let path = dir.path().join("session.json");
    let mut saved: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path)?)?;
    let expired = expired_copy(saved["accessJwt"].as_str().unwrap_or_default())?;
    saved["accessJwt"] = expired.clone().into();
    std::fs::write(&path, saved.to_string())?;
    // A wrong password: a new login would fail, so only the refresh token can bring it back.
    let (bsky, origin) =
        Bluesky::connect(&net.pds, &account.handle, &Secret::new("not-the-password".into()), path.clone()).await?;
    assert_eq!(origin, SessionOrigin::Reused);
    assert_eq!(bsky.refreshes(), 1, "the access token was refreshed once");
    let now: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path)?)?;
    assert_ne!(now["accessJwt"], expired.as_str(), "a fresh access token is saved");
    assert_ne!(now["refreshJwt"], saved["refreshJwt"], "the refresh token was used (and rotated)");
    bsky.post("refreshed and still here", Vec::new()).await?;
    Ok(())
}

#[tokio::test]
async fn a_wrong_password_is_refused_without_printing_it() -> anyhow::Result<()> {
    let net = Network::shared().await?;
    let (account, dir) = agent_account(net).await?;
    let err =
        Bluesky::connect(&net.pds, &account.handle, &Secret::new("hunter2-wrong".into()), dir.path().join("s.json"))
            .await
            .unwrap_err();
    assert!(matches!(err, Error::Login { .. }), "{err}");
    assert!(err.to_string().contains(&account.handle));
    assert!(!err.to_string().contains("hunter2-wrong"));
    Ok(())
}

#[tokio::test]
async fn mentions_and_replies_reach_the_agent_and_it_replies_in_the_thread() -> anyhow::Result<()> {
    let net = Network::shared().await?;
    let (account, dir) = agent_account(net).await?;
    let (bsky, _) = connect(net, &account, &dir).await?;
    let alice = Account::create(net, &handle("al")).await?;
    let root = alice
        .post(&format!("hello @{} how are you?", account.handle), &[(&account.handle, &account.did)], None)
        .await?;
    let mention = wait_for(INDEXED, "the mention notification", async || {
        bsky.notifications(50).await.ok()?.into_iter().find(|n| n.uri == root.uri)
    })
    .await?;
    assert_eq!(mention.reason, "mention");
    assert_eq!(mention.author_did, alice.did);
    assert_eq!(mention.author_handle, alice.handle);
    assert!(mention.text.contains("how are you"));
    assert_eq!(mention.root, None, "a top-level post has no root");

    // The agent answers; its reply points at the post as both root and parent.
    let parent = PostRef { uri: mention.uri.clone(), cid: mention.cid.clone() };
    let answer = bsky.reply("fine, thanks!", &parent, &parent, Vec::new()).await?;
    // The AppView notifies a reply's parent author only once it has indexed the parent.
    eventually(INDEXED, "the agent's answer in the AppView", async || {
        alice.thread(&root.uri).await.is_ok_and(|t| replies(&t).iter().any(|(h, _, _)| *h == account.handle))
    })
    .await?;
    // Alice answers the agent, once plainly and once also @-mentioning it.
    let answer_post = druse_tests::atproto::Post { uri: answer.uri.clone(), cid: answer.cid.clone() };
    let plain = alice.post("glad to hear", &[], Some((&root, &answer_post))).await?;
    let tagged = alice
        .post(
            &format!("and @{} one more thing", account.handle),
            &[(&account.handle, &account.did)],
            Some((&root, &answer_post)),
        )
        .await?;
    let (plain_n, tagged_n) = wait_for(INDEXED, "both replies as notifications", async || {
        let notes = bsky.notifications(50).await.ok()?;
        let p = notes.iter().find(|n| n.uri == plain.uri)?.clone();
        let t = notes.iter().find(|n| n.uri == tagged.uri)?.clone();
        Some((p, t))
    })
    .await?;
    assert_eq!(plain_n.reason, "reply");
    assert_eq!(tagged_n.reason, "mention", "a reply that also @-mentions the agent arrives as a mention");
    assert_eq!(tagged_n.root.as_ref().map(|r| r.uri.as_str()), Some(root.uri.as_str()));

    // A reply deep in the thread keeps the root and names the parent.
    let tagged_ref = PostRef { uri: tagged_n.uri.clone(), cid: tagged_n.cid.clone() };
    let root_ref = tagged_n.root.clone().expect("root");
    let deep = bsky.reply("noted!", &tagged_ref, &root_ref, Vec::new()).await?;
    let thread = wait_for(INDEXED, "the agent's reply in the thread", async || {
        let t = alice.thread(&tagged.uri).await.ok()?;
        replies(&t).into_iter().any(|(h, text, _)| h == account.handle && text == "noted!").then_some(t)
    })
    .await?;
    let (_, _, record) = replies(&thread).into_iter().find(|(_, text, _)| text == "noted!").expect("found above");
    assert_eq!(record["reply"]["root"]["uri"], root.uri.as_str());
    assert_eq!(record["reply"]["root"]["cid"], root.cid.as_str());
    assert_eq!(record["reply"]["parent"]["uri"], tagged.uri.as_str());
    assert_eq!(record["reply"]["parent"]["cid"], tagged.cid.as_str());
    assert!(deep.uri.starts_with(&format!("at://{}/app.bsky.feed.post/", account.did)));

    // The thread as the agent reads it: oldest first, ending at the post asked about.
    let posts = bsky.thread(&tagged.uri, 20).await?;
    let texts: Vec<&str> = posts.iter().map(|p| p.text.as_str()).collect();
    assert_eq!(texts.first().copied(), Some(format!("hello @{} how are you?", account.handle).as_str()));
    assert_eq!(posts.last().map(|p| p.uri.as_str()), Some(tagged.uri.as_str()));
    assert!(texts.contains(&"fine, thanks!"));

    // A like, and the notifications marked seen.
    bsky.like(&tagged_ref).await?;
    eventually(INDEXED, "the like to be indexed", async || {
        let t = alice.thread(&tagged.uri).await.ok();
        t.is_some_and(|t| t["thread"]["post"]["likeCount"].as_i64() == Some(1))
    })
    .await?;
    bsky.update_seen(&tagged_n.indexed_at).await?;
    Ok(())
}

#[tokio::test]
async fn mention_facets_count_utf8_bytes_and_resolve_through_the_pds() -> anyhow::Result<()> {
    let net = Network::shared().await?;
    let (account, dir) = agent_account(net).await?;
    let (bsky, _) = connect(net, &account, &dir).await?;
    let carol = Account::create(net, &handle("ca")).await?;
    let dave = Account::create(net, &handle("da")).await?;
    let text = format!("héllo 🌱 @{} and @{} and @nobody-here.test: https://example.com/x.", carol.handle, dave.handle);
    // Only carol may be tagged; the link is a link facet.
    let facets = bsky.facets(&text, |_, did| did == carol.did).await?;
    assert_eq!(facets.len(), 2, "{facets:?}");
    let link = &facets[0];
    assert_eq!(&text[link.byte_start..link.byte_end], "https://example.com/x", "{link:?}");
    assert_eq!(link.mentioned(), None);
    let f = &facets[1];
    assert_eq!(f.mentioned(), Some(carol.did.as_str()));
    assert_eq!(&text.as_bytes()[f.byte_start..f.byte_end], format!("@{}", carol.handle).as_bytes());
    assert_eq!(f.byte_start, "héllo 🌱 ".len());
    assert_eq!(bsky.resolve("nobody-here.test").await?, None);
    assert_eq!(bsky.resolve(&format!("@{}", dave.handle)).await?, Some(dave.did.clone()));
    // Posted, the facet makes carol's mention notification.
    let post = bsky.post(&text, facets).await?;
    let carol_bsky = {
        let dir = tempfile::tempdir()?;
        let (c, _) =
            Bluesky::connect(&net.pds, &carol.handle, &Secret::new(carol.password.clone()), dir.path().join("s.json"))
                .await?;
        c
    };
    eventually(INDEXED, "carol's mention", async || {
        carol_bsky.notifications(20).await.is_ok_and(|n| n.iter().any(|n| n.uri == post.uri && n.reason == "mention"))
    })
    .await?;
    Ok(())
}
