//! Durable state as an append-only log of control-plane inputs in an embedded transactional
//! database (redb). A record is durable when [`Store::append`] returns: the caller
//! acknowledges a request only after that. Recovery replays the records, in order, through
//! the same deterministic core that handled them the first time.

use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};
use serde::{de::DeserializeOwned, Serialize};
use std::path::{Path, PathBuf};
use thiserror::Error;

const LOG: TableDefinition<u64, &[u8]> = TableDefinition::new("log");

#[derive(Debug, Error)]
pub enum StoreError {
    #[error("store {path}: {message}")]
    Open { path: String, message: String },
    #[error("store: {0}")]
    Db(String),
    #[error("store record {seq}: {message}")]
    Corrupt { seq: u64, message: String },
}

pub struct Store {
    path: PathBuf,
    /// `None` after a failed write until the store is opened again.
    db: Option<Database>,
    next: u64,
    /// Why the last write failed, while the store has not recovered.
    failed: Option<String>,
}

impl Store {
    /// Opens (or creates) the store at `path`.
    pub fn open(path: &Path) -> Result<Store, StoreError> {
        let (db, next) = Self::open_db(path)?;
        Ok(Store { path: path.to_path_buf(), db: Some(db), next, failed: None })
    }

    fn open_db(path: &Path) -> Result<(Database, u64), StoreError> {
        let open_err =
            |e: &dyn std::fmt::Display| StoreError::Open { path: path.display().to_string(), message: e.to_string() };
        // The store holds submissions and launch environments: only its owner reads it. A new
        // file is created 0600 before redb fills it; an older store is narrowed to 0600.
        {
            use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
            std::fs::OpenOptions::new().create(true).append(true).mode(0o600).open(path).map_err(|e| open_err(&e))?;
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).map_err(|e| open_err(&e))?;
        }
        let db = Database::create(path).map_err(|e| open_err(&e))?;
        let tx = db.begin_write().map_err(db_err)?;
        tx.open_table(LOG).map_err(db_err)?;
        tx.commit().map_err(db_err)?;
        let next = {
            let rtx = db.begin_read().map_err(db_err)?;
            let t = rtx.open_table(LOG).map_err(db_err)?;
            let last = t.last().map_err(db_err)?;
            last.map(|(k, _)| k.value() + 1).unwrap_or(0)
        };
        Ok((db, next))
    }

    /// Whether the last write succeeded (a failed one leaves the store not ready until a
    /// later write finds it working again).
    pub fn ready(&self) -> Result<(), String> {
        match &self.failed {
            Some(why) => Err(why.clone()),
            None => Ok(()),
        }
    }

    /// After a failed write the database may refuse every later one (redb remembers the I/O
    /// error): open it again. Nothing acknowledged is lost: a failed write was never
    /// acknowledged, and the log must end where the caller believes it does.
    fn recover(&mut self) -> Result<(), StoreError> {
        if self.db.is_some() && self.failed.is_none() {
            return Ok(());
        }
        self.db = None;
        let (db, next) = Self::open_db(&self.path)?;
        if next != self.next {
            return Err(StoreError::Db(format!(
                "after a failed write the log ends at record {next}, not {}: restart to replay it",
                self.next
            )));
        }
        self.db = Some(db);
        Ok(())
    }

    /// Appends one record; durable when this returns `Ok`. Returns its sequence number.
    pub fn append<T: Serialize>(&mut self, record: &T) -> Result<u64, StoreError> {
        let bytes = serde_json::to_vec(record).map_err(db_err)?;
        let written = self.recover().and_then(|()| self.write(&bytes));
        match &written {
            Ok(_) => self.failed = None,
            Err(e) => self.failed = Some(e.to_string()),
        }
        written
    }

    fn write(&mut self, bytes: &[u8]) -> Result<u64, StoreError> {
        let seq = self.next;
        let db = self.db.as_ref().ok_or_else(|| StoreError::Db("the store is not open".into()))?;
        let tx = db.begin_write().map_err(db_err)?;
        {
            let mut t = tx.open_table(LOG).map_err(db_err)?;
            t.insert(seq, bytes).map_err(db_err)?;
        }
        tx.commit().map_err(db_err)?;
        self.next += 1;
        Ok(seq)
    }

    /// Every record, in append order.
    pub fn records<T: DeserializeOwned>(&self) -> Result<Vec<T>, StoreError> {
        let db = self.db.as_ref().ok_or_else(|| StoreError::Db("the store is not open".into()))?;
        let rtx = db.begin_read().map_err(db_err)?;
        let t = rtx.open_table(LOG).map_err(db_err)?;
        let mut out = Vec::new();
        for row in t.iter().map_err(db_err)? {
            let (k, v) = row.map_err(db_err)?;
            let rec = serde_json::from_slice(v.value())
                .map_err(|e| StoreError::Corrupt { seq: k.value(), message: e.to_string() })?;
            out.push(rec);
        }
        Ok(out)
    }

    pub fn len(&self) -> u64 {
        self.next
    }

    pub fn is_empty(&self) -> bool {
        self.next == 0
    }
}

fn db_err<E: std::fmt::Display>(e: E) -> StoreError {
    StoreError::Db(e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_survive_reopening_in_order() {
        let dir = std::env::temp_dir().join(format!("weave-store-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("t.redb");
        let _ = std::fs::remove_file(&path);
        {
            let mut s = Store::open(&path).unwrap();
            assert!(s.is_empty());
            for i in 0..5u32 {
                assert_eq!(s.append(&format!("r{i}")).unwrap(), i as u64);
            }
        }
        let mut s = Store::open(&path).unwrap();
        assert_eq!(s.len(), 5);
        s.append(&"r5".to_string()).unwrap();
        let recs: Vec<String> = s.records().unwrap();
        assert_eq!(recs, ["r0", "r1", "r2", "r3", "r4", "r5"]);
        let bad: Result<Vec<u32>, _> = s.records();
        assert!(matches!(bad, Err(StoreError::Corrupt { seq: 0, .. })));
    }
}

#[cfg(test)]
mod permission_tests {
    use super::Store;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn the_store_file_is_readable_by_its_owner_only() {
        let dir = std::env::temp_dir().join(format!("weave-store-perm-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("weave.redb");
        Store::open(&path).unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        // An older store made 0644 is narrowed when opened.
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        Store::open(&path).unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
