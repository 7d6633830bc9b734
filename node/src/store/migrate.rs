//! Moving the data directory of an earlier version into the store, once, before it opens.
//!
//! Earlier versions kept a fjall 2 store at the store's path (the ingest tables and the
//! memory engine's partition) and a sled database beside it (the agent's tree); older ones
//! kept everything in sled. The first open of such a directory copies every fjall 2
//! partition and every sled tree into a keyspace of the same name of a new fjall 3 database,
//! then puts it in the old store's place:
//!
//! 1. A fjall 2 store at the store's path is renamed aside (`store` → `store.fjall2`),
//!    untouched. From here on the store's path holds no database until step 4.
//! 2. The new database is built from scratch in `store.migrating` (whatever an interrupted
//!    run left there is removed first), from the fjall 2 store aside and the sled database.
//! 3. It is made durable: its journal is synced, it is closed, and every file and folder in it
//!    is synced.
//! 4. It is renamed to the store's path and the data directory is synced: this rename is the
//!    switch. Before it, a crash leaves the old data as it was and the next open runs the move
//!    again from step 2; after it, the store's path holds a fjall 3 database and the move is
//!    never run again, so it never copies old records over newer ones.
//! 5. The old data is removed (the fjall 2 store aside and the sled database). An open that
//!    finds a fjall 3 store and old data beside it removes what a crash left of it.
//!
//! fjall 2 and sled are only read here. sled is opened only when its folder holds a database,
//! so a node whose directory never had one runs no sled thread and keeps no sled cache.

use std::path::{Path, PathBuf};
use std::time::Instant;

use fjall::{Database, Keyspace, PersistMode};

/// Why the move failed. Nothing of the old data is lost by a failure: the next open tries
/// again from it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    #[error("reading the fjall 2 store: {0}")]
    Fjall2(#[from] fjall2::Error),
    #[error("reading the sled database: {0}")]
    Sled(#[from] sled::Error),
    #[error("writing the new store: {0}")]
    Fjall(#[from] fjall::Error),
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("{0} is not a keyspace name")]
    Name(String),
}

impl From<fjall2::LsmError> for Error {
    fn from(error: fjall2::LsmError) -> Self {
        Error::Fjall2(error.into())
    }
}

/// Records copied in one batch.
const BATCH: usize = 4096;

/// The cache of the fjall 2 store and the sled database while they are read: each record is
/// read once, in order.
const READ_CACHE: u64 = 8 << 20;

/// The name sled gives its default tree, which nothing of the node wrote.
const SLED_DEFAULT_TREE: &[u8] = b"__sled__default";

/// What the move needs of the store and the memory engine, passed in by the store so this
/// module names nothing of the node but the engines it reads and writes.
pub(super) struct Owners<'a> {
    /// Opens (or creates) a fjall 3 database at a path, tuned as the store.
    pub(super) open: &'a dyn Fn(&Path) -> Result<Database, fjall::Error>,
    /// Creates the keyspace a partition or tree of this name moves into, with its owner's
    /// options.
    pub(super) keyspace: &'a dyn Fn(&Database, &str) -> Result<Keyspace, fjall::Error>,
    /// The memory engine's keyspace (a sled tree of this name had its ids from sled's counter).
    pub(super) memory: &'a str,
    /// The key under which the memory engine keeps the bound below which it handed out ids.
    pub(super) memory_ids: &'a [u8],
}

/// What a move copied, for its log line.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(super) struct Moved {
    pub(super) from_fjall2: usize,
    pub(super) from_sled: usize,
    pub(super) keyspaces: usize,
}

/// The disk format of the fjall database at `path`, from its version file (`FJL` and the
/// major format: 2 for fjall 2, 3 for fjall 3); `None` if there is none.
fn fjall_format(path: &Path) -> std::io::Result<Option<u8>> {
    match std::fs::read(path.join("version")) {
        Ok(bytes) if bytes.len() >= 4 && &bytes[..3] == b"FJL" => Ok(Some(bytes[3])),
        Ok(_) => Ok(None),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(error) => Err(error),
    }
}

/// Whether `path` holds a sled database (sled 0.34 keeps its config in `conf` and its pages in
/// `db`).
fn holds_sled(path: &Path) -> bool {
    path.join("conf").is_file() || path.join("db").is_file()
}

/// `store` with `suffix` added to its last part: a sibling in the data directory.
fn beside(store: &Path, suffix: &str) -> PathBuf {
    let mut name = store.file_name().map(|n| n.to_os_string()).unwrap_or_else(|| "store".into());
    name.push(suffix);
    store.with_file_name(name)
}

/// The folder that holds `path` ("." for a bare name).
fn parent(path: &Path) -> &Path {
    match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    }
}

/// Syncs a folder, so the names created or renamed in it are durable.
fn sync_dir(path: &Path) -> std::io::Result<()> {
    std::fs::File::open(path)?.sync_all()
}

/// Syncs every file and folder under `path`, and `path` itself.
fn sync_tree(path: &Path) -> std::io::Result<()> {
    for entry in std::fs::read_dir(path)? {
        let entry = entry?;
        if entry.file_type()?.is_dir() {
            sync_tree(&entry.path())?;
        } else {
            std::fs::File::open(entry.path())?.sync_all()?;
        }
    }
    sync_dir(path)
}

/// Removes a folder if it is there.
fn remove(path: &Path) -> std::io::Result<()> {
    match std::fs::remove_dir_all(path) {
        Err(error) if error.kind() != std::io::ErrorKind::NotFound => Err(error),
        _ => Ok(()),
    }
}

/// Moves the data directory of an earlier version into a fjall 3 database at `store`, if there
/// is one (a fjall 2 store at `store`, a sled database at `sled`), as the module docs say.
/// Returns what it moved, `None` if there was nothing to move.
pub(super) fn run(store: &Path, sled: &Path, owners: &Owners<'_>) -> Result<Option<Moved>, Error> {
    let data = parent(store);
    let aside = beside(store, ".fjall2");
    let building = beside(store, ".migrating");
    match fjall_format(store)? {
        Some(3) => {
            // Moved already (or never anything to move): what is left of old data is a crash's.
            if aside.exists() || building.exists() || holds_sled(sled) {
                remove(&building)?;
                remove(&aside)?;
                if holds_sled(sled) {
                    remove(sled)?;
                }
                sync_dir(data)?;
            }
            return Ok(None);
        }
        Some(2) => {
            std::fs::rename(store, &aside)?;
            sync_dir(data)?;
        }
        _ => {}
    }
    let fjall2 = fjall_format(&aside)? == Some(2);
    let sled_held = holds_sled(sled);
    if !fjall2 && !sled_held {
        return Ok(None);
    }
    let started = Instant::now();
    remove(&building)?;
    let moved = {
        let db = (owners.open)(&building)?;
        let mut moved = Moved::default();
        let mut names = std::collections::BTreeSet::new();
        if fjall2 {
            moved.from_fjall2 = copy_fjall2(&aside, &db, owners, &mut names)?;
        }
        if sled_held {
            moved.from_sled = copy_sled(sled, &db, owners, &mut names)?;
        }
        moved.keyspaces = names.len();
        db.persist(PersistMode::SyncAll)?;
        moved
        // The database closes here: its threads stop and its files are released.
    };
    sync_tree(&building)?;
    std::fs::rename(&building, store)?;
    sync_dir(data)?;
    // The old data goes only now that the new is durable in its place.
    remove(&aside)?;
    if sled_held {
        remove(sled)?;
    }
    sync_dir(data)?;
    tracing::info!(
        from_fjall2 = moved.from_fjall2,
        from_sled = moved.from_sled,
        keyspaces = moved.keyspaces,
        elapsed_ms = started.elapsed().as_millis() as u64,
        "moved the data directory of an earlier version into the store (fjall 3)"
    );
    Ok(Some(moved))
}

/// Copies records into `keyspace` in batches; returns how many.
fn copy<E>(
    db: &Database,
    keyspace: &Keyspace,
    records: impl Iterator<Item = Result<(Vec<u8>, Vec<u8>), E>>,
) -> Result<usize, Error>
where
    Error: From<E>,
{
    let mut copied = 0;
    let mut batch = db.batch().durability(Some(PersistMode::Buffer));
    for record in records {
        let (key, value) = record?;
        batch.insert(keyspace, key, value);
        copied += 1;
        if batch.len() >= BATCH {
            std::mem::replace(&mut batch, db.batch().durability(Some(PersistMode::Buffer))).commit()?;
        }
    }
    batch.commit()?;
    Ok(copied)
}

/// Copies every partition of the fjall 2 store at `path` into the keyspace of its name.
fn copy_fjall2(
    path: &Path,
    db: &Database,
    owners: &Owners<'_>,
    names: &mut std::collections::BTreeSet<String>,
) -> Result<usize, Error> {
    let old = fjall2::Config::new(path).cache_size(READ_CACHE).open()?;
    let mut copied = 0;
    for name in old.list_partitions() {
        let name: &str = &name;
        let partition = old.open_partition(name, fjall2::PartitionCreateOptions::default())?;
        let keyspace = (owners.keyspace)(db, name)?;
        let records = partition.iter().map(|entry| entry.map(|(k, v)| (k.to_vec(), v.to_vec())));
        copied += copy(db, &keyspace, records)?;
        names.insert(name.to_owned());
    }
    Ok(copied)
}

/// Copies every tree of the sled database at `path` into the keyspace of its name (after the
/// fjall 2 partitions: a tree still in sled is the newer copy, as an interrupted move from sled
/// to fjall 2 left it). The memory engine's ids went on from sled's counter in the versions
/// that kept it in sled, so its bound is raised above every id sled handed out.
fn copy_sled(
    path: &Path,
    db: &Database,
    owners: &Owners<'_>,
    names: &mut std::collections::BTreeSet<String>,
) -> Result<usize, Error> {
    let old = sled::Config::new().path(path).cache_capacity(READ_CACHE).open()?;
    let mut copied = 0;
    for name in old.tree_names() {
        if name == SLED_DEFAULT_TREE {
            continue;
        }
        let name = std::str::from_utf8(&name).map_err(|_| Error::Name(String::from_utf8_lossy(&name).into()))?;
        let tree = old.open_tree(name)?;
        let keyspace = (owners.keyspace)(db, name)?;
        let records = tree.iter().map(|entry| entry.map(|(k, v)| (k.to_vec(), v.to_vec())));
        copied += copy(db, &keyspace, records)?;
        names.insert(name.to_owned());
        if name == owners.memory {
            let handed_out = old.generate_id()?;
            let bound = match keyspace.get(owners.memory_ids)? {
                Some(bytes) => <[u8; 8]>::try_from(&bytes[..]).map(u64::from_be_bytes).unwrap_or(0),
                None => 0,
            };
            if bound < handed_out {
                keyspace.insert(owners.memory_ids, handed_out.to_be_bytes())?;
            }
        }
    }
    Ok(copied)
}

#[cfg(test)]
mod tests;
