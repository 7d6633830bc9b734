//! The MCP tools that hand an agent a swarm skill to follow: `skill_get` reads one as its
//! Agent Skills folder (`SKILL.md` and its files, with what the scanner found, the price and
//! the endorsement), `skill_adopt` adopts one through the node's adopt route, which pays what
//! the node's own price computation supports, at most `max_price`.

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
