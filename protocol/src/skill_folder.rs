//! Agent Skills folders (the `SKILL.md` convention other agents share procedures in): their
//! rules, their digest, and how one travels inside a skill listing.
//!
//! A folder holds `SKILL.md` (YAML frontmatter, then Markdown instructions) and optional files
//! under `scripts/`, `references/` and `assets/`. druse reads the frontmatter with a small,
//! strict reader (the subset the convention uses: scalars, quoted or plain or block `|`/`>`,
//! the `metadata` string map, `allowed-tools` as a string or a list) and refuses anything else
//! with an error that names the field, so what a node stores is what it can write back.
//!
//! A folder is published as an ordinary skill listing whose text frames the files
//! ([`Folder::to_listing_text`]): nodes of any version store, price and gossip it like any other
//! skill, the author's envelope signature covers every byte of every file, and a receiver
//! recomputes the digest the text states and refuses the listing when they differ. Keys under
//! `metadata` that start with `druse-` are what an export adds (the skill's id, publisher,
//! price…); an import removes them again, so a folder imported, exported and imported again
//! has the same files and the same digest.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use sha2::{Digest as _, Sha256};

/// Size caps of a folder: it travels in one listing, whose text is at most
/// [`crate::body::limits::TEXT`] bytes.
pub mod caps {
    /// Files in one folder, `SKILL.md` included.
    pub const FILES: usize = 16;
    /// One file, in bytes.
    pub const FILE: usize = 32 * 1024;
    /// All files together, in bytes.
    pub const TOTAL: usize = 40 * 1024;
    /// One file's path, in bytes.
    pub const PATH: usize = 128;
    /// `name`, in characters.
    pub const NAME: usize = 64;
    /// `description`, in characters.
    pub const DESCRIPTION: usize = 1024;
    /// `license`, `allowed-tools`, `compatibility` and each `metadata` value, in characters.
    pub const VALUE: usize = 1024;
    /// Entries in `metadata`.
    pub const METADATA: usize = 32;
}

/// The instructions file every folder holds.
pub const SKILL_MD: &str = "SKILL.md";

/// The folders a skill's other files may sit in.
pub const SUBFOLDERS: [&str; 3] = ["scripts/", "references/", "assets/"];

/// The prefix of the `metadata` keys an export writes (and an import removes).
pub const DRUSE_KEY: &str = "druse-";

const FOLDER_MARK: &str = "<!-- druse:skill-folder ";
const FILE_MARK: &str = "<!-- druse:file ";
const MARK_END: &str = " -->\n";

/// Why a folder is not a valid skill folder.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A frontmatter field breaks a rule.
    #[error("SKILL.md field `{field}`: {problem}")]
    Field { field: String, problem: String },
    /// The frontmatter cannot be read.
    #[error("SKILL.md frontmatter, line {line}: {problem}")]
    Syntax { line: usize, problem: String },
    /// A file breaks a rule (its path, size or encoding).
    #[error("file {path}: {problem}")]
    File { path: String, problem: String },
    /// The folder as a whole breaks a rule.
    #[error("{0}")]
    Folder(String),
}

fn field(name: &str, problem: impl Into<String>) -> Error {
    Error::Field { field: name.to_owned(), problem: problem.into() }
}

fn file_error(path: &str, problem: impl Into<String>) -> Error {
    Error::File { path: path.to_owned(), problem: problem.into() }
}

/// What `SKILL.md`'s frontmatter says.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Frontmatter {
    pub name: String,
    pub description: String,
    pub license: Option<String>,
    /// `allowed-tools`, space-separated (a list is joined with spaces).
    pub allowed_tools: Option<String>,
    pub compatibility: Option<String>,
    /// `metadata`, without the `druse-` keys.
    pub metadata: BTreeMap<String, String>,
}

/// One file of a folder: its path inside the folder (`/`-separated) and its text.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct File {
    pub path: String,
    pub text: String,
}

/// A valid skill folder: `SKILL.md` first, then the other files in byte order of their paths.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Folder {
    files: Vec<File>,
    frontmatter: Frontmatter,
}

impl Folder {
    /// Checks files read from a folder named `dir_name` (`None` when the name is not known):
    /// paths (backslashes read as `/`), caps, UTF-8 text (binary files are refused: the
    /// scanner cannot read them, so nobody could check them), and the frontmatter. The
    /// `druse-` metadata an export wrote is taken out of `SKILL.md` again.
    pub fn new(files: Vec<(String, Vec<u8>)>, dir_name: Option<&str>) -> Result<Self, Error> {
        if files.len() > caps::FILES {
            return Err(Error::Folder(format!("{} files, over the cap of {}", files.len(), caps::FILES)));
        }
        let mut checked: Vec<File> = Vec::with_capacity(files.len());
        let mut total = 0usize;
        for (path, bytes) in files {
            let path = check_path(&path.replace('\\', "/"))?;
            if bytes.len() > caps::FILE {
                return Err(file_error(&path, format!("{} bytes, over the cap of {}", bytes.len(), caps::FILE)));
            }
            total += bytes.len();
            let text = String::from_utf8(bytes).map_err(|_| {
                file_error(&path, "not UTF-8 text: binary files are refused, since the scanner cannot read them")
            })?;
            if checked.iter().any(|f| f.path == path) {
                return Err(file_error(&path, "appears twice"));
            }
            checked.push(File { path, text });
        }
        if total > caps::TOTAL {
            return Err(Error::Folder(format!("{total} bytes of files, over the cap of {}", caps::TOTAL)));
        }
        checked.sort_by(|a, b| a.path.as_bytes().cmp(b.path.as_bytes()));
        let Some(skill_md) = checked.iter_mut().find(|f| f.path == SKILL_MD) else {
            return Err(Error::Folder("no SKILL.md".into()));
        };
        skill_md.text = strip_druse_metadata(&skill_md.text);
        let frontmatter = parse(&skill_md.text)?.0;
        if let Some(dir) = dir_name
            && dir != frontmatter.name
        {
            return Err(field("name", format!("`{}` is not the folder's name `{dir}`", frontmatter.name)));
        }
        // SKILL.md sorts before every subfolder (upper case before lower), so it is first.
        Ok(Self { files: checked, frontmatter })
    }

    /// A folder from its files' text (as an API request or a listing carries them).
    pub fn from_texts(files: Vec<File>, dir_name: Option<&str>) -> Result<Self, Error> {
        Self::new(files.into_iter().map(|f| (f.path, f.text.into_bytes())).collect(), dir_name)
    }

    /// The files, `SKILL.md` first.
    pub fn files(&self) -> &[File] {
        &self.files
    }

    /// What the frontmatter says.
    pub fn frontmatter(&self) -> &Frontmatter {
        &self.frontmatter
    }

    /// `SKILL.md`'s text.
    pub fn skill_md(&self) -> &str {
        self.files.first().map_or("", |f| f.text.as_str())
    }

    /// The folder's digest: `sha256:` and the lowercase hex of SHA-256 over every file in byte
    /// order of its path, each as its path, a zero byte, its length as 8 bytes big-endian and
    /// its bytes. Paths use `/` on every machine; `SKILL.md` is taken without `druse-` metadata.
    pub fn digest(&self) -> String {
        let mut hash = Sha256::new();
        for file in &self.files {
            hash.update(file.path.as_bytes());
            hash.update([0]);
            hash.update((file.text.len() as u64).to_be_bytes());
            hash.update(file.text.as_bytes());
        }
        format!("sha256:{}", data_encoding::HEXLOWER.encode(&hash.finalize()))
    }

    /// The text of a listing that carries this folder: a line with the digest, then each file
    /// after a line with its path and length in bytes.
    pub fn to_listing_text(&self) -> String {
        let mut out = format!("{FOLDER_MARK}{}{MARK_END}", self.digest());
        for file in &self.files {
            let _ = write!(out, "{FILE_MARK}{} {}{MARK_END}", file.path, file.text.len());
            out.push_str(&file.text);
            out.push('\n');
        }
        out
    }

    /// The folder a listing's text carries: `None` when the text is no folder (a distilled
    /// skill's procedure), an error when it says it is one and is not, or states a digest
    /// its files do not have.
    pub fn from_listing_text(text: &str) -> Option<Result<Self, Error>> {
        let rest = text.strip_prefix(FOLDER_MARK)?;
        Some(Self::parse_listing_text(rest))
    }

    fn parse_listing_text(rest: &str) -> Result<Self, Error> {
        let bad = |problem: &str| Error::Folder(format!("the listing's folder framing is broken: {problem}"));
        let (stated, mut rest) = rest.split_once(MARK_END).ok_or_else(|| bad("no digest line"))?;
        let mut files = Vec::new();
        while !rest.is_empty() {
            if files.len() >= caps::FILES {
                return Err(bad("too many files"));
            }
            let after = rest.strip_prefix(FILE_MARK).ok_or_else(|| bad("expected a file line"))?;
            let (line, body) = after.split_once(MARK_END).ok_or_else(|| bad("unterminated file line"))?;
            let (path, len) = line.rsplit_once(' ').ok_or_else(|| bad("no length"))?;
            let len: usize = len.parse().map_err(|_| bad("a length is not a number"))?;
            if len > caps::FILE || !body.is_char_boundary(len.min(body.len())) || body.len() < len + 1 {
                return Err(bad("a length runs past the text"));
            }
            let (content, after) = body.split_at(len);
            rest = after.strip_prefix('\n').ok_or_else(|| bad("a file does not end where its length says"))?;
            files.push(File { path: path.to_owned(), text: content.to_owned() });
        }
        let folder = Self::from_texts(files, None)?;
        if folder.digest() != stated {
            return Err(Error::Folder(format!(
                "the listing states digest {stated}, its files have {}",
                folder.digest()
            )));
        }
        if folder.files.first().is_some_and(|f| f.text != strip_druse_metadata(&f.text)) {
            return Err(bad("SKILL.md carries druse- metadata"));
        }
        Ok(folder)
    }

    /// The folder's files as an export writes them: `SKILL.md` with `entries` (keys without
    /// the `druse-` prefix) added to its `metadata`, the other files as they are.
    pub fn exported(&self, entries: &[(&str, String)]) -> Vec<File> {
        let mut files = self.files.clone();
        if let Some(skill_md) = files.first_mut() {
            skill_md.text = add_druse_metadata(&skill_md.text, entries);
        }
        files
    }

    /// A folder for a skill that was never one (a distilled procedure): its name made a valid
    /// folder name, a description from its `When:` line (or first line), its text as the
    /// instructions.
    pub fn from_procedure(name: &str, text: &str) -> Result<Self, Error> {
        let slug = slug(name);
        let line = text.lines().find_map(|l| l.trim().strip_prefix("When:")).map(str::trim);
        let first = text.lines().map(str::trim).find(|l| !l.is_empty());
        let description = match (line, first) {
            (Some(when), _) if !when.is_empty() => format!("Use when {when}"),
            (_, Some(first)) => first.to_owned(),
            _ => name.trim().to_owned(),
        };
        let description: String = description.chars().take(caps::DESCRIPTION).collect();
        let description = if description.trim().is_empty() { slug.clone() } else { description };
        let skill_md = format!("---\nname: {slug}\ndescription: {}\n---\n\n{text}\n", quote(&description));
        Self::new(vec![(SKILL_MD.to_owned(), skill_md.into_bytes())], Some(&slug))
    }
}

/// A name made a valid folder name: lower case, runs of anything but `[a-z0-9]` made one `-`,
/// at most 64 characters (`skill` when nothing is left).
pub fn slug(name: &str) -> String {
    let mut out = String::new();
    for c in name.chars().flat_map(char::to_lowercase) {
        if c.is_ascii_lowercase() || c.is_ascii_digit() {
            out.push(c);
        } else if !out.is_empty() && !out.ends_with('-') {
            out.push('-');
        }
    }
    out.truncate(caps::NAME);
    let out = out.trim_matches('-').to_owned();
    if out.is_empty() { "skill".into() } else { out }
}

fn check_path(path: &str) -> Result<String, Error> {
    if path.len() > caps::PATH {
        return Err(file_error(path, format!("the path is over {} bytes", caps::PATH)));
    }
    if path != SKILL_MD && !SUBFOLDERS.iter().any(|d| path.starts_with(d)) {
        return Err(file_error(
            path,
            "only SKILL.md and files under scripts/, references/ or assets/ belong in a skill",
        ));
    }
    for part in path.split('/') {
        let fine = !part.is_empty()
            && part != "."
            && part != ".."
            && part.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
        if !fine {
            return Err(file_error(path, "each part of a path is letters, digits, `.`, `_` or `-` (not `.` or `..`)"));
        }
    }
    Ok(path.to_owned())
}

/// Checks `SKILL.md`'s frontmatter; also answers where the instructions start.
pub fn parse(skill_md: &str) -> Result<(Frontmatter, usize), Error> {
    let (block, body_at) = frontmatter_block(skill_md)?;
    let mut seen: BTreeMap<String, String> = BTreeMap::new();
    let mut metadata = BTreeMap::new();
    let lines: Vec<&str> = block.lines().map(|l| l.strip_suffix('\r').unwrap_or(l)).collect();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        let number = i + 2;
        i += 1;
        if line.trim().is_empty() || line.trim_start().starts_with('#') {
            continue;
        }
        if line.starts_with([' ', '\t']) {
            return Err(Error::Syntax { line: number, problem: "indented line outside a block".into() });
        }
        let (key, raw) = line
            .split_once(':')
            .ok_or_else(|| Error::Syntax { line: number, problem: "expected `key: value`".into() })?;
        let key = key.trim();
        if seen.contains_key(key) {
            return Err(field(key, "appears twice"));
        }
        let raw = raw.trim();
        let children = indented(&lines, &mut i);
        let value = match key {
            "metadata" => {
                if !raw.is_empty() && !raw.starts_with('#') {
                    return Err(field("metadata", "must be a map of strings, one `key: value` per indented line"));
                }
                metadata = parse_map(&children, number)?;
                String::new()
            }
            "allowed-tools" if (raw.is_empty() || raw.starts_with('#')) && !children.is_empty() => children
                .iter()
                .filter(|l| !l.trim().is_empty())
                .map(|l| {
                    let item = l.trim().strip_prefix("- ").ok_or_else(|| field(key, "a list item starts with `- `"))?;
                    scalar(key, item.trim())
                })
                .collect::<Result<Vec<_>, _>>()?
                .join(" "),
            "allowed-tools" if raw.starts_with('[') => {
                let inner = raw
                    .strip_prefix('[')
                    .and_then(|r| r.strip_suffix(']'))
                    .ok_or_else(|| field(key, "an unclosed list"))?;
                inner.split(',').map(|s| scalar(key, s.trim())).collect::<Result<Vec<_>, _>>()?.join(" ")
            }
            "name" | "description" | "license" | "allowed-tools" | "compatibility" => {
                block_or_scalar(key, raw, &children)?
            }
            other => {
                return Err(field(
                    other,
                    "not an Agent Skills field (name, description, license, allowed-tools, compatibility, metadata)",
                ));
            }
        };
        seen.insert(key.to_owned(), value);
    }
    let name = seen.remove("name").ok_or_else(|| field("name", "missing"))?;
    check_name(&name)?;
    let description = seen.remove("description").ok_or_else(|| field("description", "missing"))?;
    if description.trim().is_empty() {
        return Err(field("description", "must not be empty"));
    }
    check_len("description", &description, caps::DESCRIPTION)?;
    for (key, value) in &seen {
        check_len(key, value, caps::VALUE)?;
    }
    if metadata.len() > caps::METADATA {
        return Err(field("metadata", format!("{} entries, over the cap of {}", metadata.len(), caps::METADATA)));
    }
    for (key, value) in &metadata {
        check_len(&format!("metadata.{key}"), value, caps::VALUE)?;
    }
    let frontmatter = Frontmatter {
        name,
        description,
        license: seen.remove("license"),
        allowed_tools: seen.remove("allowed-tools"),
        compatibility: seen.remove("compatibility"),
        metadata,
    };
    Ok((frontmatter, body_at))
}

fn check_len(name: &str, value: &str, max: usize) -> Result<(), Error> {
    let n = value.chars().count();
    if n > max {
        return Err(field(name, format!("{n} characters, over the cap of {max}")));
    }
    Ok(())
}

fn check_name(name: &str) -> Result<(), Error> {
    if name.is_empty() {
        return Err(field("name", "must not be empty"));
    }
    check_len("name", name, caps::NAME)?;
    if !name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-') {
        return Err(field("name", format!("`{name}` holds a character outside [a-z0-9-]")));
    }
    if name.starts_with('-') || name.ends_with('-') || name.contains("--") {
        return Err(field("name", format!("`{name}` starts or ends with `-`, or holds `--`")));
    }
    Ok(())
}

/// The frontmatter's lines (between the `---` lines) and the byte where the instructions start.
fn frontmatter_block(text: &str) -> Result<(&str, usize), Error> {
    let syntax = |problem: &str| Error::Syntax { line: 1, problem: problem.into() };
    let after = text
        .strip_prefix("---\n")
        .or_else(|| text.strip_prefix("---\r\n"))
        .ok_or_else(|| syntax("SKILL.md must start with a `---` line"))?;
    let start = text.len() - after.len();
    let mut at = 0;
    for line in after.split_inclusive('\n') {
        if line.trim_end() == "---" {
            return Ok((&after[..at], start + at + line.len()));
        }
        at += line.len();
    }
    Err(syntax("no closing `---` line"))
}

/// The lines after `*i` indented under it (blank lines included), moving `*i` past them.
fn indented<'a>(lines: &[&'a str], i: &mut usize) -> Vec<&'a str> {
    let mut out = Vec::new();
    while *i < lines.len() && (lines[*i].starts_with([' ', '\t']) || lines[*i].trim().is_empty()) {
        out.push(lines[*i]);
        *i += 1;
    }
    while out.last().is_some_and(|l| l.trim().is_empty()) {
        out.pop();
    }
    out
}

fn parse_map(children: &[&str], number: usize) -> Result<BTreeMap<String, String>, Error> {
    let mut map = BTreeMap::new();
    for (offset, line) in children.iter().enumerate() {
        if line.trim().is_empty() || line.trim_start().starts_with('#') {
            continue;
        }
        let (key, raw) = line.trim().split_once(':').ok_or_else(|| Error::Syntax {
            line: number + offset + 1,
            problem: "expected `key: value` in metadata".into(),
        })?;
        let key = key.trim();
        let name = format!("metadata.{key}");
        if raw.trim().is_empty() {
            return Err(field(&name, "values in metadata are strings, not maps or lists"));
        }
        let value = scalar(&name, raw.trim())?;
        if key.starts_with(DRUSE_KEY) {
            continue;
        }
        if map.insert(key.to_owned(), value).is_some() {
            return Err(field(&name, "appears twice"));
        }
    }
    Ok(map)
}

fn block_or_scalar(key: &str, raw: &str, children: &[&str]) -> Result<String, Error> {
    let Some(style) = raw.chars().next().filter(|c| matches!(c, '|' | '>')) else {
        if !children.is_empty() {
            return Err(field(key, "a value continued on indented lines must use `|` or `>`"));
        }
        return scalar(key, raw);
    };
    let indent =
        children.iter().filter(|l| !l.trim().is_empty()).map(|l| l.len() - l.trim_start().len()).min().unwrap_or(0);
    let lines: Vec<&str> = children.iter().map(|l| l.get(indent..).unwrap_or("")).collect();
    let mut out = String::new();
    if style == '|' {
        out = lines.join("\n");
    } else {
        for line in lines {
            if line.is_empty() {
                out.push('\n');
            } else {
                if !out.is_empty() && !out.ends_with('\n') {
                    out.push(' ');
                }
                out.push_str(line);
            }
        }
    }
    if !raw.contains('-') {
        out.push('\n');
    }
    Ok(out)
}

/// A one-line scalar: double-quoted (with escapes), single-quoted, or plain (a ` #` comment cut).
fn scalar(key: &str, raw: &str) -> Result<String, Error> {
    if let Some(inner) = raw.strip_prefix('"') {
        let mut out = String::new();
        let mut chars = inner.chars();
        while let Some(c) = chars.next() {
            match c {
                '"' => {
                    let rest: String = chars.collect();
                    if !(rest.trim().is_empty() || rest.trim_start().starts_with('#')) {
                        return Err(field(key, "text after the closing quote"));
                    }
                    return Ok(out);
                }
                '\\' => match chars.next() {
                    Some('n') => out.push('\n'),
                    Some('t') => out.push('\t'),
                    Some('"') => out.push('"'),
                    Some('\\') => out.push('\\'),
                    Some('/') => out.push('/'),
                    Some('u') => {
                        let hex: String = chars.by_ref().take(4).collect();
                        let c = u32::from_str_radix(&hex, 16).ok().and_then(char::from_u32);
                        out.push(c.ok_or_else(|| field(key, "a bad `\\u` escape"))?);
                    }
                    _ => return Err(field(key, "an escape other than \\n \\t \\\" \\\\ \\/ \\uXXXX")),
                },
                c => out.push(c),
            }
        }
        return Err(field(key, "an unclosed double quote"));
    }
    if let Some(inner) = raw.strip_prefix('\'') {
        let mut out = String::new();
        let mut chars = inner.chars().peekable();
        while let Some(c) = chars.next() {
            if c != '\'' {
                out.push(c);
            } else if chars.peek() == Some(&'\'') {
                out.push('\'');
                chars.next();
            } else {
                let rest: String = chars.collect();
                if !(rest.trim().is_empty() || rest.trim_start().starts_with('#')) {
                    return Err(field(key, "text after the closing quote"));
                }
                return Ok(out);
            }
        }
        return Err(field(key, "an unclosed single quote"));
    }
    let plain = match raw.find(" #") {
        Some(at) => &raw[..at],
        None => raw,
    };
    if plain.starts_with(['[', '{', '&', '*', '!', '|', '>', '@', '`']) {
        return Err(field(key, "quote a value that starts with a YAML indicator"));
    }
    Ok(plain.trim().to_owned())
}

/// A string as a double-quoted YAML scalar.
pub fn quote(value: &str) -> String {
    let mut out = String::with_capacity(value.len() + 2);
    out.push('"');
    for c in value.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The comment on a `metadata:` line an export added (so an import knows to take it out).
const ADDED_METADATA: &str = "metadata: # druse export";

/// `SKILL.md` with `druse-` entries added to `metadata`: after the block's last line when it
/// has one, else in a new block before the closing `---`.
fn add_druse_metadata(skill_md: &str, entries: &[(&str, String)]) -> String {
    let Ok((block, _)) = frontmatter_block(skill_md) else { return skill_md.to_owned() };
    let start = skill_md.len() - skill_md.trim_start_matches("---\r\n").trim_start_matches("---\n").len();
    let newline = if skill_md.starts_with("---\r\n") { "\r\n" } else { "\n" };
    let mut added = String::new();
    for (key, value) in entries {
        let _ = write!(added, "  {DRUSE_KEY}{key}: {}{newline}", quote(value));
    }
    let lines: Vec<&str> = block.split_inclusive('\n').collect();
    let mut at = start;
    let mut insert = None;
    let mut in_metadata = false;
    for line in &lines {
        let bare = line.trim_end();
        if in_metadata && !line.starts_with([' ', '\t']) && !bare.is_empty() {
            break;
        }
        if bare.starts_with("metadata:") {
            in_metadata = true;
        }
        at += line.len();
        if in_metadata && !bare.is_empty() {
            insert = Some(at);
        }
    }
    match insert {
        Some(at) => format!("{}{added}{}", &skill_md[..at], &skill_md[at..]),
        None => {
            let end = start + block.len();
            format!("{}{ADDED_METADATA}{newline}{added}{}", &skill_md[..end], &skill_md[end..])
        }
    }
}

/// `SKILL.md` without the `druse-` lines of `metadata` (and the `metadata:` line an export
/// added, once empty): what [`add_druse_metadata`] added, taken out byte for byte.
fn strip_druse_metadata(skill_md: &str) -> String {
    let Ok((block, _)) = frontmatter_block(skill_md) else { return skill_md.to_owned() };
    let start = skill_md.len() - skill_md.trim_start_matches("---\r\n").trim_start_matches("---\n").len();
    let mut kept: Vec<&str> = Vec::new();
    let mut in_metadata = false;
    let mut added_header: Option<usize> = None;
    let mut children = 0;
    for line in block.split_inclusive('\n') {
        let bare = line.trim_end();
        if !line.starts_with([' ', '\t']) && !bare.is_empty() {
            if let Some(at) = added_header.take()
                && children == 0
            {
                kept.remove(at);
            }
            in_metadata = bare.starts_with("metadata:");
            if bare == ADDED_METADATA {
                added_header = Some(kept.len());
                children = 0;
            }
        } else if in_metadata && bare.trim_start().starts_with(DRUSE_KEY) {
            continue;
        } else if in_metadata && !bare.is_empty() {
            children += 1;
        }
        kept.push(line);
    }
    if let Some(at) = added_header
        && children == 0
    {
        kept.remove(at);
    }
    let end = start + block.len();
    format!("{}{}{}", &skill_md[..start], kept.concat(), &skill_md[end..])
}

#[cfg(test)]
mod tests;
