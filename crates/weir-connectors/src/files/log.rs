//! The files of a source, in the order they were found: what readers
//! read, published only once the server has committed them.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, OnceLock, RwLock};

use tokio::sync::watch;

/// A file of a source's log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoggedFile {
    /// Its object path in the source's store.
    pub path: String,
    /// Its size when it was found: what is read of it.
    pub size: u64,
}

/// A source's committed files, by ordinal (the order they were found).
/// Append-only: an ordinal names the same file for the source's life,
/// which is what makes a split's position (an index into its files)
/// replayable.
#[derive(Debug)]
pub struct FileLog {
    files: RwLock<Vec<LoggedFile>>,
    /// How many files are published, for readers waiting for more.
    published: watch::Sender<u64>,
}

impl FileLog {
    fn new() -> Self {
        FileLog {
            files: RwLock::new(Vec::new()),
            published: watch::Sender::new(0),
        }
    }

    /// Publishes `files` as ordinals `first..`: entries already published
    /// are left as they are (the server publishes a source's committed
    /// log again after a restart).
    pub fn publish(&self, first: u64, files: &[LoggedFile]) {
        let mut held = self.files.write().expect("file log lock");
        let known = held.len() as u64;
        if first > known {
            // A gap: the entries before `first` were never published.
            return;
        }
        held.extend(files.iter().skip((known - first) as usize).cloned());
        let len = held.len() as u64;
        drop(held);
        self.published.send_replace(len);
    }

    /// How many files are published.
    pub fn len(&self) -> u64 {
        *self.published.borrow()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The file with ordinal `ordinal`, once published.
    pub fn get(&self, ordinal: u64) -> Option<LoggedFile> {
        let files = self.files.read().expect("file log lock");
        files.get(usize::try_from(ordinal).ok()?).cloned()
    }

    /// Waits until the file with ordinal `ordinal` is published.
    pub async fn wait_for(&self, ordinal: u64) {
        let mut published = self.published.subscribe();
        // The sender lives as long as `self`: the wait cannot fail.
        let _ = published.wait_for(|&len| len > ordinal).await;
    }
}

/// The log of source `id` (made on first use).
pub fn file_log(id: u64) -> Arc<FileLog> {
    registry()
        .lock()
        .expect("file log registry")
        .entry(id)
        .or_insert_with(|| Arc::new(FileLog::new()))
        .clone()
}

/// Forgets the log of a dropped source.
pub fn forget_file_log(id: u64) {
    registry().lock().expect("file log registry").remove(&id);
}

fn registry() -> &'static Mutex<BTreeMap<u64, Arc<FileLog>>> {
    static LOGS: OnceLock<Mutex<BTreeMap<u64, Arc<FileLog>>>> = OnceLock::new();
    LOGS.get_or_init(Default::default)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(name: &str) -> LoggedFile {
        LoggedFile {
            path: name.into(),
            size: 1,
        }
    }

    #[tokio::test]
    async fn publishing_again_changes_nothing_and_wakes_waiters() {
        let log = Arc::new(FileLog::new());
        log.publish(0, &[file("a"), file("b")]);
        log.publish(0, &[file("a"), file("b"), file("c")]);
        log.publish(5, &[file("gap")]);
        assert_eq!(log.len(), 3);
        assert_eq!(log.get(2), Some(file("c")));
        assert_eq!(log.get(3), None);
        let waiter = tokio::spawn({
            let log = log.clone();
            async move {
                log.wait_for(3).await;
                log.get(3)
            }
        });
        tokio::task::yield_now().await;
        log.publish(3, &[file("d")]);
        assert_eq!(waiter.await.expect("waited"), Some(file("d")));
    }
}
