//! Skills an MCP client wrote for this node (`skill_publish`), kept private until the owner
//! publishes them: checked and scanned like an import, held in the store's state table
//! (at most [`MAX_PENDING`], each within the folder caps), and published by the owner with
//! `druse-node skill approve ID` or dropped with `druse-node skill discard ID`.

use std::collections::BTreeMap;

use druse_protocol::UnixMillis;
use druse_protocol::skill_folder::{self, File, Folder};
use serde::{Deserialize, Serialize};

use super::folder::{self as skill_folder_node, Located, Refusal};

/// Skills waiting for the owner, at most.
pub const MAX_PENDING: usize = 16;
/// The state record that holds them.
const STATE_KEY: &str = "pending_skills";
/// Hex digits of the folder's digest a pending skill is named by.
const ID_LEN: usize = 16;

/// `POST /v1/skills/pending`: a `SKILL.md` text and the folder's other files.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Submission {
    pub skill_md: String,
    /// Other files by path (`scripts/run.sh`, `references/notes.md`), within the folder caps.
    #[serde(default)]
    pub files: BTreeMap<String, String>,
    /// Asking price in micro-USDC once published.
    #[serde(default)]
    pub asking_price: u64,
}

/// A skill waiting for the owner.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Pending {
    /// The first hex digits of its digest: what the owner's command names.
    pub id: String,
    pub name: String,
    pub digest: String,
    pub asking_price: u64,
    pub files: Vec<File>,
    /// Medium and low findings, for the owner to read before publishing.
    pub findings: Vec<Located>,
    pub submitted_at: UnixMillis,
}

impl Pending {
    /// The command by which the owner publishes it to the swarm.
    pub fn publish_command(&self) -> String {
        format!("druse-node skill approve {}", self.id)
    }
}

/// Why a submission was not kept.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The folder breaks the format, the scanner found something high, or it holds a secret.
    #[error(transparent)]
    Refused(#[from] Refusal),
    /// [`MAX_PENDING`] skills already wait.
    #[error("{MAX_PENDING} skills already wait for the owner: publish or discard one first")]
    Full,
    #[error(transparent)]
    Store(#[from] crate::store::Error),
}

/// Checks and scans a submission: the folder it makes, and what it would be published as.
pub fn check(submission: Submission, now: UnixMillis) -> Result<Pending, Refusal> {
    let mut files = vec![File { path: skill_folder::SKILL_MD.to_owned(), text: submission.skill_md }];
    files.extend(submission.files.into_iter().map(|(path, text)| File { path, text }));
    let folder = Folder::from_texts(files, None)?;
    let (_, findings) = skill_folder_node::listing_for(&folder, submission.asking_price, 1, None, now)?;
    let digest = folder.digest();
    let id = digest.trim_start_matches("sha256:").chars().take(ID_LEN).collect();
    Ok(Pending {
        id,
        name: folder.frontmatter().name.clone(),
        digest,
        asking_price: submission.asking_price,
        files: folder.files().to_vec(),
        findings,
        submitted_at: now,
    })
}

/// The pending skills, oldest first.
pub fn list(store: &crate::store::Store) -> Result<Vec<Pending>, Error> {
    Ok(store.state::<Vec<Pending>>(STATE_KEY)?.unwrap_or_default())
}

/// One writer at a time for the record (a read, a change, a write).
static WRITER: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Keeps `pending` (replacing one with the same digest); refused when [`MAX_PENDING`] wait.
pub fn keep(store: &crate::store::Store, pending: Pending) -> Result<Pending, Error> {
    let _one = WRITER.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let mut all = list(store)?;
    all.retain(|p| p.digest != pending.digest);
    if all.len() >= MAX_PENDING {
        return Err(Error::Full);
    }
    all.push(pending.clone());
    store.put_state(STATE_KEY, &all)?;
    Ok(pending)
}

/// Takes pending skill `id` out of the record (`None` if none has that id).
pub fn take(store: &crate::store::Store, id: &str) -> Result<Option<Pending>, Error> {
    let _one = WRITER.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let mut all = list(store)?;
    let Some(at) = all.iter().position(|p| p.id == id.trim()) else { return Ok(None) };
    let taken = all.remove(at);
    store.put_state(STATE_KEY, &all)?;
    Ok(Some(taken))
}
