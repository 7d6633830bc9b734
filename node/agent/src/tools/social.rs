//! The tools that act on Bluesky: reply and like within the batch, and what needs the owner
//! (a post outside a thread, a follow, a goal), or posts at once under the owner's standing
//! approval (a musing's or a reflection's post).

use serde::Deserialize;

use super::{Hands, Replied, TextArg, ToolError, UriArg, args};
use crate::bluesky::PostRef;
use crate::llm::ToolCall;
use crate::metrics::Metrics;
use crate::rules::Gated;
use druse_protocol::now_ms;

#[derive(Deserialize)]
struct ReplyArgs {
    uri: String,
    text: String,
}
#[derive(Deserialize)]
struct HandleArg {
    handle: String,
}
#[derive(Deserialize)]
struct GoalArgs {
    #[serde(default)]
    rkey: Option<String>,
    title: String,
    #[serde(default)]
    description: String,
}

impl Hands {
    /// Replies to a post of the batch (the table's gate checked the URI), once, within the
    /// author's limit.
    pub(super) async fn reply(&mut self, call: &ToolCall) -> Result<String, ToolError> {
        let a: ReplyArgs = args(call)?;
        if self.replied.iter().any(|r| r.to.uri == a.uri) {
            self.agent.metrics.refuse("already_replied");
            return Err(ToolError::Refused("you already replied to that post".into()));
        }
        let Some(note) = self.notes.iter().find(|n| n.uri == a.uri).cloned() else {
            return Err(ToolError::Refused("that URI is not in the current batch".into()));
        };
        if !self.agent.count_reply(&note.author_did).await {
            self.agent.metrics.refuse("rate_limit");
            return Err(ToolError::Refused("this author has had the most replies allowed for now".into()));
        }
        let parent = PostRef { uri: note.uri.clone(), cid: note.cid.clone() };
        let root = note.root.clone().unwrap_or_else(|| parent.clone());
        match self.agent.reply_fitted(&a.text, &parent, &root, &note.author_did).await {
            Ok(parts) => {
                let parts: Vec<String> = parts.into_iter().map(|p| p.uri).collect();
                let post = parts.first().cloned().unwrap_or_default();
                self.agent.metrics.replies.inc();
                self.agent.mark_answered(&note).await;
                let answer = format!("ok: replied as {post}");
                self.replied.push(Replied { to: note, text: a.text, post, parts });
                Ok(answer)
            }
            Err(e) => {
                self.failures += 1;
                Err(ToolError::Failed(format!("the reply failed: {e}")))
            }
        }
    }

    pub(super) async fn like(&mut self, call: &ToolCall) -> Result<String, ToolError> {
        let a: UriArg = args(call)?;
        let Some(note) = self.notes.iter().find(|n| n.uri == a.uri) else {
            return Err(ToolError::Refused("that URI is not in the current batch".into()));
        };
        let post = PostRef { uri: note.uri.clone(), cid: note.cid.clone() };
        match self.agent.bsky.like(&post).await {
            Ok(_) => {
                Metrics::count(&self.agent.metrics.actions, "like");
                self.liked.push(a.uri);
                Ok("ok: liked".into())
            }
            Err(e) => {
                self.failures += 1;
                Err(ToolError::Failed(format!("the like failed: {e}")))
            }
        }
    }

    /// Posts the owner's approval request for `action`.
    pub(super) async fn ask(&mut self, action: Gated) -> Result<String, ToolError> {
        self.agent.request_approval(action, self.lead()).await.map_err(|e| match e {
            crate::act::ActionError::GatedLimit => ToolError::refused(e),
            e => ToolError::failed(e),
        })
    }

    /// A post a conversation proposes: the owner approves it first.
    pub(super) async fn propose_post(&mut self, call: &ToolCall) -> Result<String, ToolError> {
        let a: TextArg = args(call)?;
        self.ask(Gated::Post { text: a.text }).await
    }

    /// A musing's or a reflection's post, at once (the owner turned it on), once per run.
    pub(super) async fn post_now(&mut self, call: &ToolCall) -> Result<String, ToolError> {
        let a: TextArg = args(call)?;
        if self.report.post.is_some() {
            self.agent.metrics.refuse("musing_second_post");
            return Err(ToolError::Refused(format!("one post per {}", self.report.entry.as_str())));
        }
        if let Some(asked) = self.optin(&a.text).await? {
            return Ok(asked);
        }
        let facets = self.agent.facets_for(&a.text, "").await;
        let post = self
            .agent
            .bsky
            .post(&a.text, facets)
            .await
            .map_err(|e| ToolError::Failed(format!("the post failed: {e}")))?;
        Metrics::count(&self.agent.metrics.actions, "post");
        self.agent.mused(now_ms()).await;
        tracing::info!(uri = %post.uri, "the agent mused: an original post");
        self.report.post = Some(post.uri.clone());
        Ok(format!("ok: posted as {}", post.uri))
    }

    /// Opt-in posting's gates (`optin`): a post that leaks or quotes a stranger is refused, and
    /// one that passes is asked of the owner (`Some`, what to tell the model) unless `autopost`.
    async fn optin(&mut self, text: &str) -> Result<Option<String>, ToolError> {
        let agent = &self.agent;
        let since = now_ms().saturating_sub(crate::schedule::DAY_MS);
        let said = agent
            .node
            .memory()
            .read(move |memory| crate::optin::said_since(memory, since))
            .await
            .map_err(ToolError::failed)?;
        let owner = &agent.config.bluesky.owner;
        match crate::optin::route(text, &said, agent.bsky.handle(), owner, agent.config.autopost) {
            Err(refused) => {
                agent.metrics.refuse(refused.label);
                Err(ToolError::Refused(refused.why))
            }
            Ok(crate::optin::Route::Post) => Ok(None),
            Ok(crate::optin::Route::AskOwner) => {
                let action = Gated::Post { text: text.to_owned() };
                let asked = agent.request_approval(action, crate::core::Lead::Agent).await;
                let asked = asked.map_err(|e| ToolError::Failed(e.to_string()))?;
                // The request is this run's one post, and a musing's for the session.
                agent.mused(now_ms()).await;
                self.report.post = asked.rsplit(' ').next().map(str::to_owned);
                Ok(Some(asked))
            }
        }
    }

    pub(super) async fn follow(&mut self, call: &ToolCall) -> Result<String, ToolError> {
        let a: HandleArg = args(call)?;
        let handle = a.handle.trim().trim_start_matches('@').to_ascii_lowercase();
        let did = match self.agent.bsky.resolve(&handle).await {
            Ok(Some(did)) => did,
            Ok(None) => return Err(ToolError::Failed(format!("the handle {handle:?} does not resolve"))),
            Err(e) => return Err(ToolError::Failed(format!("{e}"))),
        };
        self.ask(Gated::Follow { did, handle }).await
    }

    pub(super) async fn propose_goal_change(&mut self, call: &ToolCall) -> Result<String, ToolError> {
        let a: GoalArgs = args(call)?;
        let (title, description) = (a.title.trim().to_owned(), a.description.trim().to_owned());
        if title.is_empty() || title.len() > 200 || description.len() > 1000 {
            return Err(ToolError::Refused(
                "a goal needs a title (at most 200 bytes) and a description (at most 1000)".into(),
            ));
        }
        let rkey = match a.rkey.map(|k| k.trim().to_owned()).filter(|k| !k.is_empty()) {
            Some(rkey) => {
                let goals = self.agent.goals().await;
                if !goals.iter().any(|g| g.rkey == rkey) {
                    return Err(ToolError::Refused(format!(
                        "there is no goal {rkey:?}; leave rkey out for a new goal"
                    )));
                }
                rkey
            }
            None => crate::mind::goal_key(&title, now_ms()),
        };
        self.ask(Gated::Goal { rkey, title, description }).await
    }
}
