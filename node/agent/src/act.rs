//! What the agent does outside its own mind, and the gate in front of it: the owner's likes
//! that approve a request, the approved actions (post, follow, publish or adopt a skill),
//! approval requests in the agent's own words with the limit on what strangers may lead to,
//! replies fitted to Bluesky's length, facets, and the memories it stores.

use std::sync::Arc;

use druse_memory::crystal::CrystalId;
use druse_memory::engine::NewMemory;
use druse_protocol::body::{CrystalListing, ExecutionStats, SemanticType};
use druse_protocol::now_ms;

use super::bluesky::{Facet, Notification, PostRef};
use super::core::{Agent, Lead, lock};
use super::rules::Gated;

/// Why an action the agent took (or the owner approved) failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ActionError {
    #[error(transparent)]
    Bluesky(#[from] super::bluesky::Error),
    #[error("there is no crystal {0}")]
    NoCrystal(CrystalId),
    #[error("crystal {0} is not a skill the agent distilled")]
    NotASkill(CrystalId),
    #[error("skill {0} may not leave the node: {1}")]
    Private(CrystalId, String),
    #[error("skill {0} is replaced by a newer version")]
    Superseded(CrystalId),
    #[error("the skill may not be published: {0}")]
    Refused(#[from] druse_memory::governance::Refusal),
    #[error(transparent)]
    Node(#[from] crate::node::Error),
    #[error("memory: {0}")]
    Memory(#[from] super::reconcile::MemoryError),
    #[error(transparent)]
    Skill(#[from] super::swarm::UseError),
    #[error("the authors of this thread led to as many approval requests today as they may")]
    GatedLimit,
}

impl Agent {
    /// An owner's like of a pending request post approves that request's action, once.
    pub(crate) async fn on_like(self: &Arc<Self>, n: &Notification) {
        let Some(subject) = n.subject.as_deref() else { return };
        let (outcome, copy) = {
            let mut gate = lock(&self.gate);
            let pending = gate.pending().any(|r| r.post == subject);
            let outcome = gate.like(subject, &n.author_did, &self.owner_did, now_ms());
            self.show_pending(&gate);
            // A stranger's like of an ordinary post is no gate event at all.
            ((pending || n.author_did == self.owner_did).then_some(outcome), self.state.gate_copy(&gate))
        };
        // Synced before the approved action runs: a restart never approves it again.
        self.save_gate(copy, true).await;
        match outcome {
            Some(Ok(action)) => {
                self.metrics.gate_approvals.inc();
                tracing::info!(request = subject, action = %action.describe(), "the owner approved a request");
                lock(&self.status).approvals += 1;
                if let Err(error) = self.execute(action).await {
                    tracing::error!(%error, "an approved action failed");
                }
            }
            Some(Err(why)) => {
                self.metrics.refuse(why.label());
                tracing::info!(subject, reason = why.label(), "a like approved nothing");
            }
            None => {}
        }
    }

    /// Carries out an approved action.
    async fn execute(&self, action: Gated) -> Result<(), ActionError> {
        match action {
            Gated::Post { text } => {
                let facets = self.facets_for(&text, "").await;
                self.bsky.post(&text, facets).await?;
                super::metrics::Metrics::count(&self.metrics.actions, "post");
                Ok(())
            }
            Gated::Follow { did, .. } => {
                let follow = self.bsky.follow(&did).await?;
                super::metrics::Metrics::count(&self.metrics.actions, "follow");
                tracing::info!(%did, record = %follow.uri, "followed an account the owner approved");
                Ok(())
            }
            Gated::PublishSkill { crystal, .. } => self.publish_skill(crystal).await,
            Gated::AdoptSkill { skill, name, price } => {
                let id = skill.parse().map_err(|_| super::swarm::UseError::BadId(skill.clone()))?;
                match self.adopt(id, price, true).await {
                    Ok(paid) => {
                        tracing::info!(%skill, paid, "adopted a swarm skill the owner approved");
                        Ok(())
                    }
                    // The approval bound the price: asked again at the new one.
                    Err(super::swarm::UseError::PriceRose { now, .. }) => {
                        let again = Gated::AdoptSkill { skill, name, price: now };
                        self.request_approval(again, Lead::Agent).await.map(|_| ())
                    }
                    Err(error) => Err(error.into()),
                }
            }
            Gated::Goal { rkey, title, description } => {
                let record = super::mind::goal_record(&title, &description);
                self.bsky.put_record(super::mind::GOAL, &rkey, record).await?;
                lock(&self.mind).goals = None; // a goal changed: the next run reads them again
                super::metrics::Metrics::count(&self.metrics.actions, "goal");
                tracing::info!(%rkey, "set a goal the owner approved");
                Ok(())
            }
        }
    }

    /// Whether distilled skill `crystal` may be published: it exists, is the newest version
    /// and passed the privacy check (made again, in case the rules changed).
    pub(crate) async fn publishable(
        &self,
        crystal: CrystalId,
    ) -> Result<(druse_memory::crystal::Crystal, super::state::OwnSkill), ActionError> {
        let c = self.node.memory().get(crystal).await.ok_or(ActionError::NoCrystal(crystal))?;
        let skill = self.state.skill(crystal).ok_or(ActionError::NotASkill(crystal))?;
        if skill.superseded {
            return Err(ActionError::Superseded(crystal));
        }
        if let Some(why) = &skill.private {
            super::metrics::Metrics::count(&self.metrics.skills_refused, "privacy");
            return Err(ActionError::Private(crystal, why.clone()));
        }
        // The final text, with the terms of the episodes it came from as they are now.
        let (episodes, agent, owner) =
            (skill.episodes.clone(), self.bsky.handle().to_owned(), self.config.bluesky.owner.clone());
        let terms = self
            .node
            .memory()
            .read(move |memory| super::privacy::episode_terms(memory, &episodes, &agent, &owner))
            .await
            .map_err(super::reconcile::MemoryError::from)?;
        if let Some(why) = super::privacy::leaks(&c.text, &terms) {
            super::metrics::Metrics::count(&self.metrics.skills_refused, "privacy");
            return Err(ActionError::Private(crystal, why));
        }
        Ok((c, skill))
    }

    async fn publish_skill(&self, crystal: CrystalId) -> Result<(), ActionError> {
        let (c, skill) = self.publishable(crystal).await?;
        // The version it replaces, once published, is the listing this one follows.
        let previous = skill.replaces.and_then(|old| self.state.skill(old)).and_then(|s| s.published);
        // The same governance check as every published skill: memory crystals, private scope
        // and confidential content never leave the node.
        druse_memory::governance::check_publishable(
            SemanticType::TaskPattern,
            druse_memory::governance::Scope::Shared,
            druse_memory::governance::Sensitivity::Normal,
            &[&skill.name, &c.text],
        )?;
        let listing = CrystalListing {
            issued_at: now_ms(),
            skill_id: skill.skill_id.clone(),
            name: skill.name.clone(),
            text: c.text.clone(),
            semantic_type: SemanticType::TaskPattern,
            tags: vec!["agent".into(), "bluesky".into()],
            category: Some("agent".into()),
            version: skill.version,
            previous_version: previous.and_then(|p| p.parse().ok()),
            stats: ExecutionStats { executions: 0, successes: 0, avg_reward: 0.0 },
            asking_price: self.config.skill_asking_price,
        };
        if self.config.dry_run {
            tracing::info!(crystal, version = skill.version, "dry run: would have published a distilled skill");
            return Ok(());
        }
        let id = self.node.publish(listing).await?;
        tracing::info!(%id, crystal, version = skill.version, "published a distilled skill to the swarm");
        let published = super::state::OwnSkill { published: Some(id.to_string()), ..skill };
        self.write_state("record a published skill", move |state| state.put_skill(crystal, &published)).await;
        Ok(())
    }

    /// Posts an approval request that tags the owner; only the owner's like of that exact
    /// post approves `action`. The request is in the agent's own words; one that strangers'
    /// messages led to counts against each one's `gated_per_author_per_day`.
    pub(crate) async fn request_approval(&self, action: Gated, lead: Lead) -> Result<String, ActionError> {
        let led_by = match &lead {
            Lead::Strangers(authors) => authors.clone(),
            Lead::Owner | Lead::Agent => Vec::new(),
        };
        let day = now_ms() / super::schedule::DAY_MS;
        let limit = self.config.gated_per_author_per_day;
        for author in &led_by {
            let who = author.clone();
            let counted =
                self.write_state("count a stranger's request", move |s| s.count_gated(day, &who, limit)).await;
            if counted != Some(true) {
                self.metrics.refuse("gated_limit");
                tracing::info!(%author, action = %action.describe(), "over the daily limit of requests a stranger may lead to");
                return Err(ActionError::GatedLimit);
            }
        }
        let owner = &self.config.bluesky.owner;
        let mut text = format!(
            "@{} approval request: may I {}? Like this post to approve.",
            owner.trim_start_matches('@'),
            action.request(lead == Lead::Owner)
        );
        text = super::posts::shorten(&text, super::posts::MAX_GRAPHEMES);
        let facets = self.facets_for(&text, "").await;
        let post = self.bsky.post(&text, facets).await?;
        let copy = {
            let mut gate = lock(&self.gate);
            gate.open(post.uri.clone(), action, led_by, now_ms(), self.config.approval_ttl);
            self.show_pending(&gate);
            self.state.gate_copy(&gate)
        };
        self.save_gate(copy, false).await;
        self.metrics.gate_requests.inc();
        let led = match lead {
            Lead::Owner => "owner",
            Lead::Agent => "agent",
            Lead::Strangers(_) => "stranger",
        };
        super::metrics::Metrics::count(&self.metrics.gate_requests_led, led);
        Ok(format!("ok: asked the owner for approval in {}", post.uri))
    }

    /// Replies `text` to `parent` in the thread rooted at `root`, fitted to Bluesky's length:
    /// a longer answer becomes a thread of parts, each replying to the one before, or is
    /// shortened (`long_posts`). Returns every part posted, first to last (never none).
    pub(crate) async fn reply_fitted(
        &self,
        text: &str,
        parent: &PostRef,
        root: &PostRef,
        answered: &str,
    ) -> Result<Vec<PostRef>, super::bluesky::Error> {
        let max = super::posts::MAX_GRAPHEMES;
        let parts = match self.config.long_posts {
            crate::config::LongPosts::Thread => super::posts::split(text, max, self.config.max_thread_posts),
            crate::config::LongPosts::Shorten => vec![super::posts::shorten(text, max)],
        };
        if parts.len() > 1 || parts.first().is_some_and(|p| p.len() < text.trim().len()) {
            tracing::info!(
                graphemes = super::posts::graphemes(text),
                parts = parts.len(),
                "an answer over Bluesky's 300 graphemes was fitted"
            );
        }
        let mut posted = Vec::new();
        let mut previous = parent.clone();
        for part in parts.iter().filter(|p| !p.is_empty()) {
            let facets = self.facets_for(part, answered).await;
            let post = self.bsky.reply(part, &previous, root, facets).await?;
            posted.push(post.clone());
            previous = post;
        }
        if posted.is_empty() {
            return Err(super::bluesky::Error::Invalid("an empty reply".into()));
        }
        Ok(posted)
    }

    /// Link facets, and mention facets only for the owner, users who consented, and
    /// `answered` (the author being replied to) unless they asked not to be tagged.
    pub(crate) async fn facets_for(&self, text: &str, answered: &str) -> Vec<Facet> {
        let result = self
            .bsky
            .facets(text, |_, did| {
                did == self.owner_did
                    || match self.state.consent(did) {
                        Some(yes) => yes,
                        None => did == answered,
                    }
            })
            .await;
        let facets = result.unwrap_or_else(|error| {
            tracing::warn!(%error, "could not resolve mentions; posting without facets");
            Vec::new()
        });
        let found = super::facets::mentions(text).len();
        let tagged = facets.iter().filter(|f| f.mentioned().is_some()).count();
        if found > tagged {
            self.metrics
                .refused
                .get_or_create(&super::metrics::Label { label: "no_consent_facet" })
                .inc_by((found - tagged) as u64);
        }
        facets
    }

    /// Stores a memory through the node's engine.
    pub(crate) async fn store(&self, new: NewMemory) -> Result<CrystalId, ActionError> {
        let added =
            self.node.memory().add(new, "agent", now_ms()).await.map_err(super::reconcile::MemoryError::from)?;
        Ok(added.crystal.id)
    }
}
