//! The agent's secrets, read from the environment variables its config names.

use crate::config::{Config, Invalid};

/// A secret read from the environment: never printed, never logged.
#[derive(Clone)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: String) -> Self {
        Self(value)
    }
    pub(crate) fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret([redacted])")
    }
}

/// The secrets an enabled agent needs, read from the variables its config names.
#[derive(Debug, Clone)]
pub struct Secrets {
    pub(crate) password: Secret,
    pub(crate) llm_key: Option<Secret>,
}

impl Secrets {
    /// Reads them, or refuses with a sentence naming the key and the variable. `None` when
    /// the agent is off.
    pub fn from_env(agent: &Config) -> Result<Option<Self>, Invalid> {
        if !agent.enabled {
            return Ok(None);
        }
        let var = &agent.bluesky.password_env;
        let password = match std::env::var(var) {
            Ok(v) if !v.is_empty() => Secret(v),
            // A chat-only agent has no account to log in to.
            _ if agent.chat_only() => Secret(String::new()),
            _ => {
                return Err(Invalid(format!(
                    "agent.bluesky.password_env names {var}, which is not set: export the agent's app password in it"
                )));
            }
        };
        let llm_key = if agent.llm.api_key_env.is_empty() {
            None
        } else {
            let var = &agent.llm.api_key_env;
            match std::env::var(var) {
                Ok(v) if !v.is_empty() => Some(Secret(v)),
                _ => {
                    return Err(Invalid(format!(
                        "agent.llm.api_key_env names {var}, which is not set (leave api_key_env empty for a server that needs no key)"
                    )));
                }
            }
        };
        Ok(Some(Self { password, llm_key }))
    }
}
