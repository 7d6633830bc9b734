//! The MCP tools that hand an agent a swarm skill to follow: `skill_get` reads one as its
//! Agent Skills folder (`SKILL.md` and its files, with what the scanner found, the price and
//! the endorsement), `skill_adopt` adopts one through the node's adopt route, which pays what
//! the node's own price computation supports, within the owner's rules, and `skill_publish`
//! hands the node a `SKILL.md` (and its files) to keep private until the owner publishes it.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::Deserialize;

use super::tools::{Invalid, Request};
use crate::api;

/// `skill_get`: one skill as a folder.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GetArgs {
    /// The skill's content id (`skill_search`'s `id`).
    pub id: String,
}

impl GetArgs {
    /// `GET /v1/skills/{id}/folder`.
    pub fn request(&self) -> Result<Request, Invalid> {
        let id = api::parse_id(self.id.trim()).map_err(|e| Invalid::new("id", e.detail))?;
        Ok(Request::Get(format!("/v1/skills/{id}/folder")))
    }

    /// `GET /v1/skills/{id}`: its market view (price, endorsement, stats).
    pub fn listing(&self) -> Result<Request, Invalid> {
        let id = api::parse_id(self.id.trim()).map_err(|e| Invalid::new("id", e.detail))?;
        Ok(Request::Get(format!("/v1/skills/{id}")))
    }
}

/// `skill_adopt`: adopt a skill, paying at most `max_price`.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AdoptArgs {
    /// The skill's content id (`skill_search`'s `id`).
    pub id: String,
    /// The most to pay, in micro-USDC: a price settled above it is refused and nothing is paid.
    #[serde(default)]
    pub max_price: Option<u64>,
}

impl AdoptArgs {
    /// The node's adopt route: the one place a tool adopts through.
    pub fn request(&self) -> Result<Request, Invalid> {
        let id = api::parse_id(self.id.trim()).map_err(|e| Invalid::new("id", e.detail))?;
        let query = self.max_price.map(|max| format!("?max_price={max}")).unwrap_or_default();
        Ok(Request::Post(format!("/v1/skills/{id}/adopt{query}"), serde_json::json!({})))
    }
}

/// `skill_publish`: a skill for the node to keep private until the owner publishes it.
#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PublishArgs {
    /// The `SKILL.md` text: YAML frontmatter (`name`: at most 64 characters of `[a-z0-9-]`;
    /// `description`: at most 1024 characters, what it does and when to use it; optional
    /// `license`, `allowed-tools`, `metadata`), then the instructions in Markdown.
    pub skill_md: String,
    /// The folder's other files by path (`scripts/run.sh`, `references/notes.md`), as text:
    /// at most 16 files of 32 KiB each and 40 KiB in all, `SKILL.md` included.
    #[serde(default)]
    pub files: BTreeMap<String, String>,
    /// The asking price once published, in micro-USDC (default 0).
    #[serde(default)]
    pub asking_price: u64,
}

impl PublishArgs {
    /// `POST /v1/skills/pending`, where the node checks and scans it as an import.
    pub fn request(self) -> Result<Request, Invalid> {
        if self.skill_md.trim().is_empty() {
            return Err(Invalid::new("skill_md", "SKILL.md is empty"));
        }
        let body = crate::skill::pending::Submission {
            skill_md: self.skill_md,
            files: self.files,
            asking_price: self.asking_price,
        };
        let body = serde_json::to_value(&body).map_err(|e| Invalid { field: None, detail: e.to_string() })?;
        Ok(Request::Post("/v1/skills/pending".into(), body))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skill_tools_name_a_bad_id_and_reach_the_routes() {
        let id = druse_protocol::ContentId::of(b"skill").to_string();
        let get = GetArgs { id: format!(" {id} ") };
        assert_eq!(get.request().unwrap_or_else(|e| panic!("{e}")), Request::Get(format!("/v1/skills/{id}/folder")));
        let adopt = AdoptArgs { id: id.clone(), max_price: Some(300) };
        assert_eq!(
            adopt.request().unwrap_or_else(|e| panic!("{e}")),
            Request::Post(format!("/v1/skills/{id}/adopt?max_price=300"), serde_json::json!({}))
        );
        let bad = AdoptArgs { id: "nope".into(), max_price: None }.request().expect_err("refused");
        assert_eq!(bad.field.as_deref(), Some("id"));
    }
}
