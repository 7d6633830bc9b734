//! `druse-node skill import DIR` and `skill export ID DIR`: an Agent Skills folder read from
//! disk for the node's import route, and a stored skill written back as one.

use std::path::{Path, PathBuf};

use anyhow::Context;
use druse_protocol::skill_folder::{Folder, caps};

use crate::skill::folder::{Exported, ImportRequest};

/// Reads a skill folder: every file under `dir` except hidden ones (`.git`, `.DS_Store`),
/// checked against the format's rules here first, so a bad folder is named before any upload.
pub fn read(dir: &Path, asking_price: u64) -> anyhow::Result<ImportRequest> {
    let dir_name = dir
        .canonicalize()
        .with_context(|| format!("reading {}", dir.display()))?
        .file_name()
        .and_then(|n| n.to_str())
        .map(str::to_owned)
        .context("the folder has no name")?;
    let mut files = Vec::new();
    let mut total = 0u64;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(current) = stack.pop() {
        for entry in std::fs::read_dir(&current).with_context(|| format!("reading {}", current.display()))? {
            let entry = entry?;
            let path = entry.path();
            if entry.file_name().to_string_lossy().starts_with('.') {
                continue;
            }
            let rel = path.strip_prefix(dir).unwrap_or(&path).to_string_lossy().replace('\\', "/");
            let kind = entry.file_type()?;
            if kind.is_symlink() {
                anyhow::bail!("file {rel}: a symbolic link; a skill folder holds files only");
            }
            if kind.is_dir() {
                stack.push(path);
                continue;
            }
            let len = entry.metadata()?.len();
            total += len;
            anyhow::ensure!(files.len() < caps::FILES, "over {} files in {}", caps::FILES, dir.display());
            anyhow::ensure!(len as usize <= caps::FILE, "file {rel}: {len} bytes, over the cap of {}", caps::FILE);
            anyhow::ensure!(total as usize <= caps::TOTAL, "over {} bytes of files in {}", caps::TOTAL, dir.display());
            files.push((rel, std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?));
        }
    }
    let folder = Folder::new(files, Some(&dir_name))?;
    Ok(ImportRequest { dir_name: Some(dir_name), files: folder.files().to_vec(), asking_price })
}

/// Writes an exported skill into `dir` when `dir` is named after the skill, else into
/// `dir/<name>`; answers the folder written.
pub fn write(dir: &Path, exported: &Exported) -> anyhow::Result<PathBuf> {
    let named = dir.file_name().and_then(|n| n.to_str()) == Some(exported.name.as_str());
    let root = if named { dir.to_path_buf() } else { dir.join(&exported.name) };
    // The paths passed the format's rules on the node; checked again, since they name files here.
    let folder = Folder::from_texts(exported.files.clone(), Some(&exported.name))?;
    for file in &exported.files {
        let path = root.join(&file.path);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).with_context(|| format!("creating {}", parent.display()))?;
        }
        std::fs::write(&path, &file.text).with_context(|| format!("writing {}", path.display()))?;
    }
    anyhow::ensure!(folder.digest() == exported.digest, "the exported files do not have the digest the node states");
    Ok(root)
}
