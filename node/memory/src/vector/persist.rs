//! Sealed segments on disk, so a restart reads its graphs instead of building them again.
//!
//! A segment's file, `seg-<uid>.hnsw`, holds the magic bytes, a header (format version, the
//! dimension and build parameters the graph was built with, its length and build time), the
//! instant-distance graph with its vectors and entries in postcard's encoding, and a CRC-32 of
//! everything before it. It is written under a temporary name, synced and renamed, so a file
//! under its final name is whole. Builds add files and replacements remove them, so a crash
//! leaves at worst a file too many, whose vectors a start then finds dead and drops.
//!
//! Nothing else is written: which stored vector is live is decided at each start from the
//! store, the source of truth (see [`super::VectorIndex::open`]).

use std::fs::{self, File};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

const MAGIC: &[u8; 8] = b"DRUSEHNS";
const VERSION: u32 = 1;
const SUFFIX: &str = "hnsw";

/// What a segment's file says about its graph, ahead of the graph itself.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(super) struct Header {
    pub(super) version: u32,
    pub(super) dim: u32,
    pub(super) ef_construction: u32,
    pub(super) ef_search: u32,
    pub(super) heuristic: bool,
    pub(super) uid: u64,
    pub(super) len: u64,
    pub(super) build_micros: u64,
    pub(super) built_at_millis: u64,
}

impl Header {
    /// The header of segment `uid`: `len` vectors of `dim` values in a graph built with
    /// `ef_construction`, `ef_search` and `heuristic`, in `took`, finished `at`.
    #[expect(clippy::too_many_arguments, reason = "one per field of the header")]
    pub(super) fn new(
        dim: usize,
        ef_construction: usize,
        ef_search: usize,
        heuristic: bool,
        uid: u64,
        len: usize,
        took: Duration,
        at: SystemTime,
    ) -> Self {
        Self {
            version: VERSION,
            dim: dim as u32,
            ef_construction: ef_construction as u32,
            ef_search: ef_search as u32,
            heuristic,
            uid,
            len: len as u64,
            build_micros: took.as_micros().try_into().unwrap_or(u64::MAX),
            built_at_millis: at.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64),
        }
    }

    /// Whether a graph with this header was built like one with `other`'s.
    pub(super) fn built_like(&self, other: &Header) -> bool {
        (self.dim, self.ef_construction, self.ef_search, self.heuristic)
            == (other.dim, other.ef_construction, other.ef_search, other.heuristic)
    }

    pub(super) fn build_time(&self) -> Duration {
        Duration::from_micros(self.build_micros)
    }

    pub(super) fn built_at(&self) -> SystemTime {
        UNIX_EPOCH + Duration::from_millis(self.built_at_millis)
    }
}

/// Why a segment's file was not read.
#[derive(Debug, thiserror::Error)]
pub(super) enum ReadError {
    #[error(transparent)]
    Io(#[from] io::Error),
    #[error("the file is cut short or its checksum does not match")]
    Checksum,
    #[error("not a segment file of this format")]
    Format,
    #[error("built for another dimension or other parameters")]
    Params,
    #[error("undecodable: {0}")]
    Decode(#[from] postcard::Error),
}

/// The path of segment `uid`'s file in `dir`.
pub(super) fn path(dir: &Path, uid: u64) -> PathBuf {
    dir.join(format!("seg-{uid:016x}.{SUFFIX}"))
}

/// The segment files in `dir` with their uids, and removes what an interrupted write left.
pub(super) fn list(dir: &Path) -> io::Result<Vec<(u64, PathBuf)>> {
    let mut files = Vec::new();
    for entry in fs::read_dir(dir)? {
        let path = entry?.path();
        let Some(name) = path.file_name().and_then(|n| n.to_str()) else { continue };
        if name.ends_with(".tmp") {
            let _ = fs::remove_file(&path);
            continue;
        }
        let uid = name
            .strip_prefix("seg-")
            .and_then(|rest| rest.strip_suffix(&format!(".{SUFFIX}")))
            .and_then(|hex| u64::from_str_radix(hex, 16).ok());
        if let Some(uid) = uid {
            files.push((uid, path));
        }
    }
    files.sort_unstable_by_key(|&(uid, _)| uid);
    Ok(files)
}

/// A writer that keeps the CRC-32 of what went through it.
struct Checksummed<W> {
    inner: W,
    crc: crc32fast::Hasher,
}

impl<W: Write> Write for Checksummed<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.crc.update(&buf[..n]);
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// Writes a segment's file durably (its header, then `graph`): a temporary file, synced,
/// renamed, and the directory synced.
pub(super) fn write(dir: &Path, header: &Header, graph: &impl Serialize) -> io::Result<()> {
    let done = path(dir, header.uid);
    let tmp = done.with_extension("tmp");
    let written = (|| {
        let file = File::create(&tmp)?;
        let mut out = Checksummed { inner: BufWriter::with_capacity(1 << 20, file), crc: crc32fast::Hasher::new() };
        out.write_all(MAGIC)?;
        let out = postcard::to_io(header, out).map_err(io::Error::other)?;
        let Checksummed { inner: mut out, crc } = postcard::to_io(graph, out).map_err(io::Error::other)?;
        out.write_all(&crc.finalize().to_le_bytes())?;
        let file = out.into_inner().map_err(io::IntoInnerError::into_error)?;
        file.sync_all()
    })();
    if let Err(error) = written {
        let _ = fs::remove_file(&tmp);
        return Err(error);
    }
    fs::rename(&tmp, &done)?;
    File::open(dir)?.sync_all()
}

/// Reads a segment's file: whole, this format, and built like `expected` says (its uid and
/// length aside); the caller checks the graph itself.
pub(super) fn read<T: DeserializeOwned>(file: &Path, expected: &Header) -> Result<(Header, T), ReadError> {
    let bytes = fs::read(file)?;
    let Some((body, crc)) = bytes.split_last_chunk::<4>() else { return Err(ReadError::Checksum) };
    if crc32fast::hash(body) != u32::from_le_bytes(*crc) {
        return Err(ReadError::Checksum);
    }
    let rest = body.strip_prefix(MAGIC).ok_or(ReadError::Format)?;
    let (header, rest) = postcard::take_from_bytes::<Header>(rest)?;
    if header.version != VERSION {
        return Err(ReadError::Format);
    }
    if !header.built_like(expected) {
        return Err(ReadError::Params);
    }
    Ok((header, postcard::from_bytes(rest)?))
}
