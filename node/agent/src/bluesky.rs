//! The agent's Bluesky account through atrium-api: log in (the session persisted 0600 in the
//! data directory and refreshed by atrium when it expires), notifications, threads, replies
//! with root and parent refs, likes, posts, and mention facets resolved through the agent's
//! own PDS. Everything Bluesky sends is read defensively: sizes are capped and nothing in
//! it can panic the node.

use std::path::PathBuf;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use atrium_api::agent::atp_agent::store::AtpSessionStore;
use atrium_api::agent::atp_agent::{AtpAgent, AtpSession};
use atrium_api::agent::{AuthorizationProvider, Configure};
use atrium_api::app::bsky;
use atrium_api::com::atproto;
use atrium_api::record::KnownRecord;
use atrium_api::types::string::{AtIdentifier, Cid, Datetime, Did, Handle, Nsid};
use atrium_api::types::{LimitedNonZeroU8, LimitedU16, TryIntoUnknown, Union};
use atrium_common::store::Store;
use atrium_xrpc::types::AuthorizationToken;
use atrium_xrpc::{HttpClient, XrpcClient};
use serde_json::Value;

use super::facets;
use super::secret::Secret;

mod profile;
pub use profile::{Profile, Standing};

/// Largest XRPC answer read.
const MAX_BODY: usize = 4 * 1024 * 1024;
/// Longest wait for one XRPC call.
const TIMEOUT: Duration = Duration::from_secs(30);
/// The CID of a dry run's made-up records (a well-formed CIDv1 of nothing that exists).
const DRY_RUN_CID: &str = "bafyreiaq7uytdshwftdttrgsrx6kv44c3uyu6yetenz25puby2xjjb6ezi";

/// Longest post text the PDS takes in bytes (beside its 300 graphemes).
const MAX_POST_BYTES: usize = 3000;
/// Longest text taken from another's post.
const MAX_TEXT_IN: usize = 3000;

/// Why a Bluesky call failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    #[error("bluesky: {0}")]
    Xrpc(String),
    #[error("bluesky login as {handle} failed: {detail}")]
    Login { handle: String, detail: String },
    #[error("bluesky: {0}")]
    Invalid(String),
    #[error("bluesky session file {path}: {detail}")]
    Session { path: PathBuf, detail: String },
}

fn xrpc<E: std::fmt::Debug>(e: atrium_xrpc::Error<E>) -> Error {
    Error::Xrpc(xrpc_text(&e))
}

/// An XRPC error as a sentence: the status and the server's error, never a token.
fn xrpc_text<E: std::fmt::Debug>(e: &atrium_xrpc::Error<E>) -> String {
    let mut text = match e {
        atrium_xrpc::Error::XrpcResponse(r) => match &r.error {
            Some(atrium_xrpc::error::XrpcErrorKind::Undefined(body)) => format!(
                "{} {}: {}",
                r.status,
                body.error.as_deref().unwrap_or("error"),
                body.message.as_deref().unwrap_or("")
            ),
            Some(known) => format!("{} {known:?}", r.status),
            None => r.status.to_string(),
        },
        atrium_xrpc::Error::HttpClient(c) => c.to_string(),
        other => format!("{other:?}"),
    };
    super::llm::truncate(&mut text, 500);
    text
}

/// The HTTP transport atrium speaks through: reqwest with a timeout and a size cap; none for
/// a chat-only agent, whose every request is refused with [`NO_ACCOUNT`].
#[derive(Debug, Clone)]
pub struct Transport {
    http: Option<reqwest::Client>,
    base: String,
}

/// What a chat-only agent answers when something would reach Bluesky.
pub const NO_ACCOUNT: &str =
    "this agent has no Bluesky account ([agent.bluesky] handle is not set): it answers only its operator's chat";

impl Transport {
    fn new(base: &str) -> Result<Self, Error> {
        let http = reqwest::Client::builder()
            .timeout(TIMEOUT)
            .connect_timeout(Duration::from_secs(10))
            .build()
            .map_err(|e| Error::Xrpc(e.to_string()))?;
        Ok(Self { http: Some(http), base: base.trim_end_matches('/').to_owned() })
    }
}

impl HttpClient for Transport {
    async fn send_http(
        &self,
        request: http::Request<Vec<u8>>,
    ) -> Result<http::Response<Vec<u8>>, Box<dyn std::error::Error + Send + Sync + 'static>> {
        let Some(http) = &self.http else { return Err(NO_ACCOUNT.into()) };
        let (parts, body) = request.into_parts();
        let mut out = http.request(parts.method, parts.uri.to_string()).body(body);
        for (name, value) in &parts.headers {
            out = out.header(name, value);
        }
        let mut response = out.send().await?;
        let mut builder = http::Response::builder().status(response.status());
        for (name, value) in response.headers() {
            builder = builder.header(name, value);
        }
        let mut bytes = Vec::new();
        while let Some(chunk) = response.chunk().await? {
            if bytes.len() + chunk.len() > MAX_BODY {
                return Err(format!("answer over {MAX_BODY} bytes").into());
            }
            bytes.extend_from_slice(&chunk);
        }
        Ok(builder.body(bytes)?)
    }
}

impl XrpcClient for Transport {
    fn base_uri(&self) -> String {
        self.base.clone()
    }
}

/// The session, kept in a 0600 file in the data directory so a restart reuses it; atrium
/// writes it again whenever it refreshes the tokens.
#[derive(Debug)]
pub struct SessionFile {
    path: PathBuf,
    cache: Mutex<Option<AtpSession>>,
    /// Sessions written: one per login, one per refresh.
    writes: Arc<AtomicU64>,
}

impl SessionFile {
    /// Opens the file; one that cannot be read or parsed is ignored (the agent logs in again).
    pub fn open(path: PathBuf) -> Self {
        let cache = std::fs::read(&path).ok().and_then(|bytes| serde_json::from_slice::<AtpSession>(&bytes).ok());
        Self { path, cache: Mutex::new(cache), writes: Arc::new(AtomicU64::new(0)) }
    }

    fn cached(&self) -> Option<AtpSession> {
        self.cache.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn write(&self, session: &AtpSession) -> Result<(), Error> {
        let err = |e: &dyn std::fmt::Display| Error::Session { path: self.path.clone(), detail: e.to_string() };
        let bytes = serde_json::to_vec(session).map_err(|e| err(&e))?;
        let tmp = self.path.with_extension("tmp");
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create(true).truncate(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        {
            use std::io::Write;
            let mut file = options.open(&tmp).map_err(|e| err(&e))?;
            file.write_all(&bytes).map_err(|e| err(&e))?;
            file.sync_all().map_err(|e| err(&e))?;
        }
        std::fs::rename(&tmp, &self.path).map_err(|e| err(&e))
    }
}

impl Store<(), AtpSession> for SessionFile {
    type Error = Error;

    async fn get(&self, _key: &()) -> Result<Option<AtpSession>, Error> {
        Ok(self.cached())
    }

    async fn set(&self, _key: (), value: AtpSession) -> Result<(), Error> {
        self.writes.fetch_add(1, Ordering::Relaxed);
        let written = self.write(&value);
        *self.cache.lock().unwrap_or_else(|p| p.into_inner()) = Some(value);
        if let Err(error) = &written {
            tracing::warn!(%error, "could not persist the Bluesky session");
        }
        written
    }

    async fn del(&self, _key: &()) -> Result<(), Error> {
        self.clear().await
    }

    async fn clear(&self) -> Result<(), Error> {
        *self.cache.lock().unwrap_or_else(|p| p.into_inner()) = None;
        match std::fs::remove_file(&self.path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(Error::Session { path: self.path.clone(), detail: e.to_string() })
            }
            _ => Ok(()),
        }
    }
}

impl AuthorizationProvider for SessionFile {
    async fn authorization_token(&self, is_refresh: bool) -> Option<AuthorizationToken> {
        self.cached()
            .map(|s| AuthorizationToken::Bearer(if is_refresh { s.refresh_jwt.clone() } else { s.access_jwt.clone() }))
    }
}

impl AtpSessionStore for SessionFile {}

/// A post the agent can point at: its URI and CID.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PostRef {
    pub uri: String,
    pub cid: String,
}

/// One notification, as much of it as the agent reads.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Notification {
    pub uri: String,
    pub cid: String,
    pub author_did: String,
    pub author_handle: String,
    /// `mention`, `reply`, `like`, `follow`, `quote`, `repost`, …
    pub reason: String,
    /// What a like or repost was of.
    pub subject: Option<String>,
    /// The post's text (empty for a like or follow), capped.
    pub text: String,
    /// The thread's root, when the post is a reply.
    pub root: Option<PostRef>,
    /// The post it answers, when it is a reply.
    pub parent: Option<PostRef>,
    pub indexed_at: String,
    /// The account has seen it (marked by `updateSeen`, from this node or another client).
    pub is_read: bool,
}

/// One post of a thread, oldest first.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ThreadPost {
    pub uri: String,
    pub author_handle: String,
    pub text: String,
}

/// The agent's logged-in Bluesky account.
pub struct Bluesky {
    agent: AtpAgent<SessionFile, Transport>,
    /// Writes nothing: every write is logged and answered with a made-up reference.
    dry_run: bool,
    dry_writes: AtomicU64,
    did: String,
    handle: String,
    /// The session file's writes, and how many of them were logins.
    writes: Arc<AtomicU64>,
    logins: u64,
}

impl std::fmt::Debug for Bluesky {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bluesky").field("did", &self.did).field("handle", &self.handle).finish()
    }
}

/// How the session was obtained.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SessionOrigin {
    /// The session file's session still worked (refreshed if it had expired).
    Reused,
    /// A new login with the app password.
    LoggedIn,
}

impl Bluesky {
    /// Reuses the session saved in `session_path` if it is this handle's and still works
    /// (atrium refreshes an expired access token), or logs in with `password`.
    pub async fn connect(
        service: &str,
        handle: &str,
        password: &Secret,
        session_path: PathBuf,
    ) -> Result<(Self, SessionOrigin), Error> {
        let handle = handle.trim_start_matches('@').to_ascii_lowercase();
        let store = SessionFile::open(session_path);
        let writes = Arc::clone(&store.writes);
        let saved = store.cached().filter(|s| s.handle.as_str().eq_ignore_ascii_case(&handle));
        let agent = AtpAgent::new(Transport::new(service)?, store);
        if let Some(saved) = saved {
            match agent.api.com.atproto.server.get_session().await {
                Ok(current) if current.did == saved.did => {
                    let did = current.did.as_str().to_owned();
                    if writes.load(Ordering::Relaxed) > 0 {
                        tracing::info!("the saved Bluesky session's access token had expired: refreshed it");
                    }
                    let this =
                        Self { agent, dry_run: false, dry_writes: AtomicU64::new(0), did, handle, writes, logins: 0 };
                    return Ok((this, SessionOrigin::Reused));
                }
                Ok(_) => tracing::warn!("the saved Bluesky session is another account's; logging in again"),
                Err(error) => tracing::info!(%error, "the saved Bluesky session no longer works; logging in again"),
            }
        }
        let session = agent
            .login(&handle, password.expose())
            .await
            .map_err(|e| Error::Login { handle: handle.clone(), detail: xrpc_text(&e) })?;
        // Requests keep going to the configured service (a PDS or an entryway).
        agent.configure_endpoint(service.trim_end_matches('/').to_owned());
        let did = session.did.as_str().to_owned();
        tracing::info!(handle, "logged in to Bluesky with the app password (createSession)");
        let this = Self { agent, dry_run: false, dry_writes: AtomicU64::new(0), did, handle, writes, logins: 1 };
        Ok((this, SessionOrigin::LoggedIn))
    }

    /// An agent without an account (`Config::chat_only`): every request it would send is
    /// refused with [`NO_ACCOUNT`], so nothing reaches a network.
    pub fn offline(session_path: PathBuf) -> Self {
        let store = SessionFile::open(session_path);
        let writes = Arc::clone(&store.writes);
        let transport = Transport { http: None, base: String::new() };
        let agent = AtpAgent::new(transport, store);
        Self {
            agent,
            dry_run: false,
            dry_writes: AtomicU64::new(0),
            did: String::new(),
            handle: String::new(),
            writes,
            logins: 0,
        }
    }

    pub fn did(&self) -> &str {
        &self.did
    }

    /// From now on writes nothing to the account (the agent's `dry_run`): each write is
    /// logged as what it would have been.
    pub fn set_dry_run(&mut self, dry_run: bool) {
        self.dry_run = dry_run;
    }

    /// In a dry run, logs the write and answers a made-up reference to it.
    fn dry(&self, collection: &str, record: &impl serde::Serialize) -> Option<PostRef> {
        if !self.dry_run {
            return None;
        }
        let n = self.dry_writes.fetch_add(1, Ordering::Relaxed);
        let mut record = serde_json::to_string(record).unwrap_or_default();
        super::llm::truncate(&mut record, 4096);
        tracing::info!(collection, %record, "dry run: would write this record; nothing was written");
        Some(PostRef { uri: format!("at://{}/{collection}/dryrun{n}", self.did), cid: DRY_RUN_CID.to_owned() })
    }

    pub fn handle(&self) -> &str {
        &self.handle
    }

    /// How often the access token was refreshed with the refresh token since `connect`.
    pub fn refreshes(&self) -> u64 {
        self.writes.load(Ordering::Relaxed).saturating_sub(self.logins)
    }

    /// Follows the account `did`.
    pub async fn follow(&self, did: &str) -> Result<PostRef, Error> {
        let subject = Did::new(did.to_owned()).map_err(|e| Error::Invalid(format!("did {did:?}: {e}")))?;
        let record = bsky::graph::follow::RecordData { created_at: Datetime::now(), subject, via: None };
        self.create(KnownRecord::AppBskyGraphFollow(Box::new(record.into())), "app.bsky.graph.follow").await
    }

    /// Unread-or-not notifications, newest first, at most `limit` (1–100).
    pub async fn notifications(&self, limit: u8) -> Result<Vec<Notification>, Error> {
        Ok(self.notifications_page(limit, None).await?.0)
    }

    /// The account's notifications, newest first, page after page, at most `max`.
    pub async fn history(&self, max: usize) -> Result<Vec<Notification>, Error> {
        pages(max, |cursor| self.notifications_page(PAGE as u8, cursor)).await
    }

    async fn notifications_page(
        &self,
        limit: u8,
        cursor: Option<String>,
    ) -> Result<(Vec<Notification>, Option<String>), Error> {
        let limit =
            LimitedNonZeroU8::<100>::try_from(limit.clamp(1, 100)).map_err(|e| Error::Invalid(e.to_string()))?;
        let out = self
            .agent
            .api
            .app
            .bsky
            .notification
            .list_notifications(
                bsky::notification::list_notifications::ParametersData {
                    cursor,
                    limit: Some(limit),
                    priority: None,
                    reasons: None,
                    seen_at: None,
                }
                .into(),
            )
            .await
            .map_err(xrpc)?;
        let notes = out.data.notifications.into_iter().map(|n| notification(n.data)).collect();
        Ok((notes, out.data.cursor))
    }

    /// Marks notifications up to `newest` (the indexing time of the newest one read) as
    /// seen, that one included: the AppView counts a notification read only when it was
    /// indexed before the time seen, so the time sent is a millisecond later.
    pub async fn update_seen(&self, newest: &str) -> Result<(), Error> {
        if self.dry_run {
            return Ok(());
        }
        let newest = Datetime::from_str(newest).map_err(|e| Error::Invalid(format!("seen_at: {e:?}")))?;
        let seen_at = Datetime::new(*newest.as_ref() + chrono::Duration::milliseconds(1));
        self.agent
            .api
            .app
            .bsky
            .notification
            .update_seen(bsky::notification::update_seen::InputData { seen_at }.into())
            .await
            .map_err(xrpc)
    }

    /// The thread above `uri` and the post itself, oldest first, at most `max_posts`.
    pub async fn thread(&self, uri: &str, max_posts: usize) -> Result<Vec<ThreadPost>, Error> {
        let height =
            LimitedU16::<1000>::try_from(max_posts.min(100) as u16).map_err(|e| Error::Invalid(e.to_string()))?;
        let depth = LimitedU16::<1000>::try_from(0u16).map_err(|e| Error::Invalid(e.to_string()))?;
        let out = self
            .agent
            .api
            .app
            .bsky
            .feed
            .get_post_thread(
                bsky::feed::get_post_thread::ParametersData {
                    depth: Some(depth),
                    parent_height: Some(height),
                    uri: uri.to_owned(),
                }
                .into(),
            )
            .await
            .map_err(xrpc)?;
        // Read through JSON: the shape is a chain of `parent` links, each capped here.
        let value = serde_json::to_value(&out.data.thread).map_err(|e| Error::Invalid(e.to_string()))?;
        let mut posts = Vec::new();
        let mut node = Some(&value);
        while let Some(n) = node {
            if posts.len() >= max_posts {
                break;
            }
            if let Some(post) = n.get("post") {
                posts.push(ThreadPost {
                    uri: str_at(post, &["uri"]),
                    author_handle: str_at(post, &["author", "handle"]),
                    text: capped(str_at(post, &["record", "text"])),
                });
            }
            node = n.get("parent");
        }
        posts.reverse();
        Ok(posts)
    }

    /// Posts `text` as a reply to `parent` in the thread rooted at `root`.
    pub async fn reply(
        &self,
        text: &str,
        parent: &PostRef,
        root: &PostRef,
        facets: Vec<Facet>,
    ) -> Result<PostRef, Error> {
        let reply = bsky::feed::post::ReplyRefData { parent: strong(parent)?, root: strong(root)? }.into();
        self.create_post(text, Some(reply), facets).await
    }

    /// Posts `text` on its own.
    pub async fn post(&self, text: &str, facets: Vec<Facet>) -> Result<PostRef, Error> {
        self.create_post(text, None, facets).await
    }

    async fn create_post(
        &self,
        text: &str,
        reply: Option<bsky::feed::post::ReplyRef>,
        facets: Vec<Facet>,
    ) -> Result<PostRef, Error> {
        let length = super::posts::graphemes(text);
        if text.trim().is_empty() || length > super::posts::MAX_GRAPHEMES || text.len() > MAX_POST_BYTES {
            return Err(Error::Invalid(format!(
                "a post must have 1 to {} graphemes (and {MAX_POST_BYTES} bytes) of text; this one has {length} ({} bytes)",
                super::posts::MAX_GRAPHEMES,
                text.len()
            )));
        }
        let facets = facets
            .into_iter()
            .map(|f| -> Result<bsky::richtext::facet::Main, Error> {
                use bsky::richtext::facet::MainFeaturesItem;
                let feature = match f.feature {
                    Feature::Mention { did } => {
                        let did = Did::new(did).map_err(|e| Error::Invalid(e.to_owned()))?;
                        MainFeaturesItem::Mention(Box::new(bsky::richtext::facet::MentionData { did }.into()))
                    }
                    Feature::Link { uri } => {
                        MainFeaturesItem::Link(Box::new(bsky::richtext::facet::LinkData { uri }.into()))
                    }
                };
                Ok(bsky::richtext::facet::MainData {
                    features: vec![Union::Refs(feature)],
                    index: bsky::richtext::facet::ByteSliceData { byte_end: f.byte_end, byte_start: f.byte_start }
                        .into(),
                }
                .into())
            })
            .collect::<Result<Vec<_>, _>>()?;
        let record = bsky::feed::post::RecordData {
            created_at: Datetime::now(),
            embed: None,
            entities: None,
            facets: (!facets.is_empty()).then_some(facets),
            labels: None,
            langs: None,
            reply,
            tags: None,
            text: text.to_owned(),
        };
        self.create(KnownRecord::AppBskyFeedPost(Box::new(record.into())), "app.bsky.feed.post").await
    }

    /// Likes `post`.
    pub async fn like(&self, post: &PostRef) -> Result<PostRef, Error> {
        let record = bsky::feed::like::RecordData { created_at: Datetime::now(), subject: strong(post)?, via: None };
        self.create(KnownRecord::AppBskyFeedLike(Box::new(record.into())), "app.bsky.feed.like").await
    }

    async fn create(&self, record: KnownRecord, collection: &str) -> Result<PostRef, Error> {
        if let Some(made_up) = self.dry(collection, &record) {
            return Ok(made_up);
        }
        let record = record.try_into_unknown().map_err(|e| Error::Invalid(e.to_string()))?;
        let repo = AtIdentifier::Did(Did::new(self.did.clone()).map_err(|e| Error::Invalid(e.to_owned()))?);
        let out = self
            .agent
            .api
            .com
            .atproto
            .repo
            .create_record(
                atproto::repo::create_record::InputData {
                    collection: Nsid::new(collection.to_owned()).map_err(|e| Error::Invalid(e.to_owned()))?,
                    record,
                    repo,
                    rkey: None,
                    swap_commit: None,
                    validate: None,
                }
                .into(),
            )
            .await
            .map_err(xrpc)?;
        Ok(PostRef { uri: out.data.uri, cid: out.data.cid.as_ref().to_string() })
    }

    /// The DID a handle has, asked of the agent's own PDS (which resolves it as the network
    /// does, without a fixed public host): `None` when it has none.
    pub async fn resolve(&self, handle: &str) -> Result<Option<String>, Error> {
        let Ok(handle) = Handle::new(handle.trim_start_matches('@').to_owned()) else { return Ok(None) };
        match self
            .agent
            .api
            .com
            .atproto
            .identity
            .resolve_handle(atproto::identity::resolve_handle::ParametersData { handle }.into())
            .await
        {
            Ok(out) => Ok(Some(out.data.did.as_str().to_owned())),
            Err(atrium_xrpc::Error::XrpcResponse(e)) if e.status.as_u16() == 400 => Ok(None),
            Err(e) => Err(xrpc(e)),
        }
    }

    /// Link facets for the URIs in `text`, and mention facets for the `@handle`s that
    /// `may_tag` allows, each resolved through the agent's PDS; a handle that does not resolve
    /// gets none.
    pub async fn facets(&self, text: &str, may_tag: impl Fn(&str, &str) -> bool) -> Result<Vec<Facet>, Error> {
        let mut out: Vec<Facet> = facets::links(text)
            .into_iter()
            .take(16)
            .map(|l| Facet { byte_start: l.byte_start, byte_end: l.byte_end, feature: Feature::Link { uri: l.uri } })
            .collect();
        for mention in facets::mentions(text).into_iter().take(16) {
            let Some(did) = self.resolve(&mention.handle).await? else { continue };
            if may_tag(&mention.handle, &did) {
                let feature = Feature::Mention { did };
                out.push(Facet { byte_start: mention.byte_start, byte_end: mention.byte_end, feature });
            }
        }
        Ok(out)
    }

    /// The records of `collection` in the agent's own repository, newest first, at most
    /// `max`: each with its record key and its value.
    pub async fn own_records(&self, collection: &str, max: usize) -> Result<Vec<(String, Value)>, Error> {
        let repo = AtIdentifier::Did(Did::new(self.did.clone()).map_err(|e| Error::Invalid(e.to_owned()))?);
        let collection = Nsid::new(collection.to_owned()).map_err(|e| Error::Invalid(e.to_owned()))?;
        pages(max, |cursor| self.records_page(&repo, &collection, cursor)).await
    }

    async fn records_page(
        &self,
        repo: &AtIdentifier,
        collection: &Nsid,
        cursor: Option<String>,
    ) -> Result<(Vec<(String, Value)>, Option<String>), Error> {
        let limit = LimitedNonZeroU8::<100>::try_from(PAGE as u8).map_err(|e| Error::Invalid(e.to_string()))?;
        let page = self
            .agent
            .api
            .com
            .atproto
            .repo
            .list_records(
                atproto::repo::list_records::ParametersData {
                    collection: collection.clone(),
                    cursor,
                    limit: Some(limit),
                    repo: repo.clone(),
                    reverse: None,
                }
                .into(),
            )
            .await
            .map_err(xrpc)?;
        let records = page.data.records.into_iter().map(|r| {
            let rkey = r.uri.rsplit('/').next().unwrap_or_default().to_owned();
            (rkey, serde_json::to_value(&r.value).unwrap_or(Value::Null))
        });
        Ok((records.collect(), page.data.cursor))
    }

    /// Writes `record` (a JSON object with its `$type`) as `rkey` of `collection` in the
    /// agent's repository, replacing what was there.
    pub async fn put_record(&self, collection: &str, rkey: &str, record: Value) -> Result<(), Error> {
        if self.dry(collection, &record).is_some() {
            return Ok(());
        }
        let repo = AtIdentifier::Did(Did::new(self.did.clone()).map_err(|e| Error::Invalid(e.to_owned()))?);
        let record: atrium_api::types::Unknown =
            serde_json::from_value(record).map_err(|e| Error::Invalid(e.to_string()))?;
        self.agent
            .api
            .com
            .atproto
            .repo
            .put_record(
                atproto::repo::put_record::InputData {
                    collection: Nsid::new(collection.to_owned()).map_err(|e| Error::Invalid(e.to_owned()))?,
                    record,
                    repo,
                    rkey: rkey.parse().map_err(|e| Error::Invalid(format!("record key {rkey:?}: {e}")))?,
                    swap_commit: None,
                    swap_record: None,
                    validate: Some(false),
                }
                .into(),
            )
            .await
            .map_err(xrpc)?;
        Ok(())
    }
}

/// A facet: a byte range of the text and what it is.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Facet {
    pub byte_start: usize,
    pub byte_end: usize,
    pub feature: Feature,
}

/// What a facet marks.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Feature {
    /// A mention of the account `did`.
    Mention { did: String },
    /// A link to `uri`.
    Link { uri: String },
}

impl Facet {
    /// The DID it mentions, if it is a mention.
    pub fn mentioned(&self) -> Option<&str> {
        match &self.feature {
            Feature::Mention { did } => Some(did),
            Feature::Link { .. } => None,
        }
    }
}

/// Items a page of a listing holds at most.
const PAGE: usize = 100;

/// Page after page of a listing, from its first, until a page comes back short or without a
/// cursor, or `max` items are read.
async fn pages<T, F, Fut>(max: usize, mut page: F) -> Result<Vec<T>, Error>
where
    F: FnMut(Option<String>) -> Fut,
    Fut: std::future::Future<Output = Result<(Vec<T>, Option<String>), Error>>,
{
    let mut out = Vec::new();
    let mut cursor = None;
    while out.len() < max {
        let (items, next) = page(cursor.take()).await?;
        let full = items.len() == PAGE;
        out.extend(items);
        match next {
            Some(next) if full => cursor = Some(next),
            _ => break,
        }
    }
    out.truncate(max);
    Ok(out)
}

fn strong(post: &PostRef) -> Result<atproto::repo::strong_ref::Main, Error> {
    let cid = Cid::from_str(&post.cid).map_err(|e| Error::Invalid(format!("cid {:?}: {e}", post.cid)))?;
    Ok(atproto::repo::strong_ref::MainData { cid, uri: post.uri.clone() }.into())
}

fn str_at(value: &Value, path: &[&str]) -> String {
    let mut v = value;
    for key in path {
        match v.get(key) {
            Some(next) => v = next,
            None => return String::new(),
        }
    }
    v.as_str().unwrap_or_default().chars().take(MAX_TEXT_IN).collect()
}

fn capped(mut text: String) -> String {
    super::llm::truncate(&mut text, MAX_TEXT_IN);
    text
}

fn notification(n: bsky::notification::list_notifications::NotificationData) -> Notification {
    let record = serde_json::to_value(&n.record).unwrap_or(Value::Null);
    let reference = |which: &str| {
        let post = record.get("reply")?.get(which)?;
        let uri = post.get("uri")?.as_str()?.to_owned();
        let cid = post.get("cid")?.as_str()?.to_owned();
        Some(PostRef { uri, cid })
    };
    let (root, parent) = (reference("root"), reference("parent"));
    Notification {
        uri: n.uri,
        cid: n.cid.as_ref().to_string(),
        author_did: n.author.did.as_str().to_owned(),
        author_handle: n.author.handle.as_str().to_owned(),
        reason: n.reason.chars().take(32).collect(),
        subject: n.reason_subject,
        text: capped(str_at(&record, &["text"])),
        root,
        parent,
        indexed_at: n.indexed_at.as_str().to_owned(),
        is_read: n.is_read,
    }
}

/// Shares one client among the agent's tasks.
pub type Shared = Arc<Bluesky>;
