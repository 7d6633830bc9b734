//! Agent Skills folders on the node: an imported folder becomes a skill listing (scanned
//! first), and any stored skill, imported or distilled, is written back as a folder whose
//! `metadata` says where it came from (`druse_protocol::skill_folder` holds the format).
//!
//! The scanner runs at each door: an import with a high finding is refused with the rule, the
//! file and the line; an export refuses one too (a skill stored before the scanner existed, or
//! the node's own kept private) and writes the medium and low findings into `metadata`
//! (`druse-findings`), so whoever installs the folder sees what a reviewer would.

use druse_protocol::body::{CrystalListing, ExecutionStats, SemanticType};
use druse_protocol::scan::{self, Finding, Report, Severity};
use druse_protocol::skill_folder::{self, File, Folder};
use druse_protocol::{ContentId, UnixMillis};
use serde::{Deserialize, Serialize};

use super::Skill;

/// `POST /v1/skills/import`: a folder's files as read from disk.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ImportRequest {
    /// The folder's name on disk, which `name` must equal (`None`: not checked).
    #[serde(default)]
    pub dir_name: Option<String>,
    pub files: Vec<File>,
    /// Asking price in micro-USDC.
    #[serde(default)]
    pub asking_price: u64,
}

/// The answer to an import.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Imported {
    pub content_id: ContentId,
    pub name: String,
    pub version: u32,
    pub digest: String,
    /// Medium and low findings, kept for a reviewer.
    pub findings: Vec<Located>,
    /// The same folder was already this node's latest version: nothing new was published.
    pub unchanged: bool,
}

/// A stored skill as a folder (`GET /v1/skills/{id}/folder`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Exported {
    /// The folder's name (its `name` field).
    pub name: String,
    /// The digest of the folder's files without the export's `druse-` metadata.
    pub digest: String,
    /// The files to write, `SKILL.md` with the export's metadata.
    pub files: Vec<File>,
    pub findings: Vec<Located>,
}

/// A finding as a reviewer reads it: where it is, to the line when one line holds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Located {
    #[serde(flatten)]
    pub finding: Finding,
    /// The 1-based line of the file that holds it alone, if one does.
    pub line: Option<usize>,
}

impl std::fmt::Display for Located {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let severity = match self.finding.severity {
            Severity::High => "high",
            Severity::Medium => "medium",
            Severity::Low => "low",
        };
        write!(f, "{severity} `{}` in {}", self.finding.rule, self.finding.file)?;
        if let Some(line) = self.line {
            write!(f, " line {line}")?;
        }
        write!(f, ": {}", self.finding.detail)
    }
}

/// Why an import or export was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// The folder breaks the format's rules.
    #[error(transparent)]
    Folder(#[from] skill_folder::Error),
    /// The scanner found something high.
    #[error("refused by the skill scanner: {0}")]
    Scan(Located),
    /// It looks like it holds a password, key or token.
    #[error("refused: {0} looks like it holds a password, key or token")]
    Confidential(String),
}

/// The files a listing's text carries: a folder's files, or `SKILL.md` for a distilled
/// procedure; the listing's name first, as the ingest scan has always read it.
fn scanned_files(listing: &CrystalListing) -> Result<Vec<(String, String)>, skill_folder::Error> {
    let mut files = vec![("name".to_owned(), listing.name.clone())];
    match Folder::from_listing_text(&listing.text) {
        Some(folder) => files.extend(folder?.files().iter().map(|f| (f.path.clone(), f.text.clone()))),
        None => files.push((skill_folder::SKILL_MD.to_owned(), listing.text.clone())),
    }
    Ok(files)
}

fn run_scan(files: &[(String, String)]) -> Report {
    let borrowed: Vec<(&str, &str)> = files.iter().map(|(p, t)| (p.as_str(), t.as_str())).collect();
    scan::scan(&borrowed, &[])
}

/// What the scanner finds in a listing, its folder's files one by one; a listing whose text
/// claims a folder it does not hold (a broken frame or a wrong digest) is a finding
/// of its own (`skill-folder`, high).
pub fn scan_listing(listing: &CrystalListing) -> Report {
    match scanned_files(listing) {
        Ok(files) => run_scan(&files),
        Err(error) => Report {
            findings: vec![Finding {
                rule: "skill-folder".into(),
                severity: Severity::High,
                file: skill_folder::SKILL_MD.into(),
                detail: error.to_string().chars().take(80).collect(),
            }],
        },
    }
}

/// A listing's findings, each with its line where one line of its file holds it.
pub fn findings(listing: &CrystalListing) -> Vec<Located> {
    let report = scan_listing(listing);
    let files = scanned_files(listing).unwrap_or_default();
    report.findings.into_iter().map(|finding| locate(finding, &files)).collect()
}

/// The finding with the first line of its file that the rule finds alone.
fn locate(finding: Finding, files: &[(String, String)]) -> Located {
    let line = files.iter().find(|(path, _)| *path == finding.file).and_then(|(path, text)| {
        text.lines()
            .position(|line| {
                run_scan(&[(path.clone(), line.to_owned())]).findings.iter().any(|f| f.rule == finding.rule)
            })
            .map(|at| at + 1)
    });
    Located { finding, line }
}

/// The listing an imported folder is published as, after the scanner and the secret check:
/// named after the folder, its text the folder's frame, version `version` after `previous`.
pub fn listing_for(
    folder: &Folder,
    asking_price: u64,
    version: u32,
    previous_version: Option<ContentId>,
    now: UnixMillis,
) -> Result<(CrystalListing, Vec<Located>), Refusal> {
    let name = folder.frontmatter().name.clone();
    if let Some(file) = folder.files().iter().find(|f| druse_memory::governance::is_confidential(&f.text)) {
        return Err(Refusal::Confidential(file.path.clone()));
    }
    let listing = CrystalListing {
        issued_at: now,
        name: name.clone(),
        text: folder.to_listing_text(),
        semantic_type: SemanticType::Skill,
        tags: vec!["agent-skill".into()],
        category: None,
        skill_id: name,
        version,
        previous_version,
        stats: ExecutionStats { executions: 0, successes: 0, avg_reward: 0.0 },
        asking_price,
    };
    let found = findings(&listing);
    if let Some(high) = found.iter().find(|f| f.finding.severity == Severity::High) {
        return Err(Refusal::Scan(high.clone()));
    }
    Ok((listing, found))
}

/// The folder a stored skill is: the one it was imported as, or one made from its procedure.
pub fn folder_of(listing: &CrystalListing) -> Result<Folder, skill_folder::Error> {
    match Folder::from_listing_text(&listing.text) {
        Some(folder) => folder,
        None => Folder::from_procedure(&listing.name, &listing.text),
    }
}

/// What an export writes into `metadata` besides the folder's own entries.
#[derive(Debug, Clone)]
pub struct Provenance<'a> {
    pub skill: &'a Skill,
    /// The price this node computes.
    pub computed_price: u64,
}

/// A stored skill as a folder to write, refused when the scanner finds something high.
pub fn export(provenance: &Provenance<'_>) -> Result<Exported, Refusal> {
    let skill = provenance.skill;
    let folder = folder_of(&skill.listing)?;
    let found = findings(&skill.listing);
    if let Some(high) = found.iter().find(|f| f.finding.severity == Severity::High) {
        return Err(Refusal::Scan(high.clone()));
    }
    let mut entries = vec![
        ("id", skill.id.to_string()),
        ("skill-id", skill.listing.skill_id.clone()),
        ("version", skill.listing.version.to_string()),
        ("publisher", skill.author.to_string()),
        ("digest", folder.digest()),
        ("asking-price", skill.listing.asking_price.to_string()),
        ("price", provenance.computed_price.to_string()),
    ];
    match &skill.endorsement {
        Some(e) => {
            let verdict = if skill.is_verified { "endorsed" } else { "revoked" };
            entries.push(("endorsement", format!("{verdict} by {} (seq {})", e.by, e.seq)));
        }
        None => entries.push(("endorsement", "none".into())),
    }
    if !found.is_empty() {
        let list: Vec<String> = found.iter().map(ToString::to_string).collect();
        entries.push(("findings", list.join("; ")));
    }
    let entries: Vec<(&str, String)> = entries.into_iter().collect();
    Ok(Exported {
        name: folder.frontmatter().name.clone(),
        digest: folder.digest(),
        files: folder.exported(&entries),
        findings: found,
    })
}

#[cfg(test)]
mod tests;
