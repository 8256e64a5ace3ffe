//! Dead letters: a source's records that do not parse, kept with
//! `bad_records = 'dead_letter'` in a folder of the state store, one
//! object per record, named by where the record was (a Kafka partition
//! and offset, a file's ordinal and byte).
//!
//! A reader stores a batch's dead letters before it hands over the rows
//! after them, so a checkpoint's positions never pass a record whose dead
//! letter is not stored: none is lost. A reader that reads the record
//! again (after a crash, or a second view's reader) writes the same
//! object again: none is kept twice. Each letter records the split
//! position that passes its record, so that readers of the folder can
//! show only the letters a committed checkpoint has read past
//! ([`DeadLetter::read_by`]).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use futures::{StreamExt, TryStreamExt};
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};

use crate::duration::parse_duration;
use crate::records::BadRecords;

/// The source option that keeps a source's dead letters only so long
/// after they were stored (by default they are kept until the source is
/// dropped).
pub const RETENTION_OPTION: &str = "dead_letter.retention";

/// How long `options` (a source's) keep dead letters, if they say; checks
/// that they keep dead letters at all.
pub fn retention(options: &BTreeMap<String, String>) -> Result<Option<Duration>, String> {
    let Some(value) = options.get(RETENTION_OPTION) else {
        return Ok(None);
    };
    let keeps = options
        .get("bad_records")
        .is_some_and(|mode| BadRecords::parse(mode) == Ok(BadRecords::DeadLetter));
    if !keeps {
        return Err(format!(
            "{RETENTION_OPTION} needs bad_records = 'dead_letter'"
        ));
    }
    parse_duration(RETENTION_OPTION, value).map(Some)
}

/// How many objects are written or read at once.
const CONCURRENCY: usize = 16;

/// A record that did not parse.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeadLetter {
    /// Names its object: its place in a form that sorts in the source's
    /// order (`p00003-o00000000000000001234`).
    pub key: String,
    /// Its place, for people (`partition 3 offset 1234`).
    pub place: String,
    /// Why it did not parse.
    pub error: String,
    /// Its value as read.
    pub value: Vec<u8>,
    /// Its source split and the split position at which the record has
    /// been read (letters stored before Weir kept it have none).
    pub passed_at: Option<(u32, u64)>,
}

impl DeadLetter {
    /// Whether a checkpoint whose split positions are `positions` has
    /// read the record (a letter without a split position counts as read).
    pub fn read_by(&self, positions: &[u64]) -> bool {
        match self.passed_at {
            None => true,
            Some((split, at)) => positions
                .get(split as usize)
                .is_some_and(|&position| position >= at),
        }
    }

    fn encode(&self) -> Vec<u8> {
        let mut object = serde_json::json!({
            "place": self.place,
            "error": self.error,
            "value": hex::encode(&self.value),
        });
        if let Some((split, at)) = self.passed_at {
            object["split"] = split.into();
            object["passed_at"] = at.into();
        }
        serde_json::to_vec(&object).expect("a JSON object serializes")
    }

    fn decode(key: &str, bytes: &[u8]) -> Option<DeadLetter> {
        let object: serde_json::Value = serde_json::from_slice(bytes).ok()?;
        let split = object.get("split").and_then(|v| v.as_u64());
        let at = object.get("passed_at").and_then(|v| v.as_u64());
        Some(DeadLetter {
            key: key.to_owned(),
            place: object.get("place")?.as_str()?.to_owned(),
            error: object.get("error")?.as_str()?.to_owned(),
            value: hex::decode(object.get("value")?.as_str()?).ok()?,
            passed_at: split.zip(at).map(|(split, at)| (split as u32, at)),
        })
    }
}

/// Where a record that did not parse was: its letter's name and text, and
/// the split position that passes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordPlace {
    /// Names its letter's object, in the source's order.
    pub key: String,
    /// Its place, for people.
    pub text: String,
    /// Its split.
    pub split: u32,
    /// The split's position once the record has been read.
    pub passed_at: u64,
}

/// The folder of one source's dead letters.
#[derive(Debug, Clone)]
pub struct DeadLetterBox {
    store: Arc<dyn ObjectStore>,
    folder: Path,
}

impl DeadLetterBox {
    /// The dead letters under `folder` of `store`.
    pub fn new(store: Arc<dyn ObjectStore>, folder: Path) -> Self {
        DeadLetterBox { store, folder }
    }

    /// The box of `name` inside this one's folder (a source's, by its id).
    pub fn folder(&self, name: impl std::fmt::Display) -> DeadLetterBox {
        DeadLetterBox {
            store: self.store.clone(),
            folder: self.folder.clone().join(name.to_string()),
        }
    }

    /// The names of the folders inside this one (sources' ids).
    pub async fn folders(&self) -> object_store::Result<Vec<String>> {
        let listed = self.store.list_with_delimiter(Some(&self.folder)).await?;
        Ok(listed
            .common_prefixes
            .iter()
            .filter_map(|prefix| prefix.filename().map(str::to_owned))
            .collect())
    }

    /// Stores `letters`; returns once every one is stored.
    pub async fn put(&self, letters: Vec<DeadLetter>) -> object_store::Result<()> {
        futures::stream::iter(letters)
            .map(|letter| {
                let path = self.folder.clone().join(letter.key.as_str());
                let payload = PutPayload::from(letter.encode());
                async move { self.store.put(&path, payload).await.map(|_| ()) }
            })
            .buffer_unordered(CONCURRENCY)
            .try_collect()
            .await
    }

    /// Every stored dead letter, in the source's order.
    pub async fn list(&self) -> object_store::Result<Vec<DeadLetter>> {
        let paths: Vec<Path> = self
            .store
            .list(Some(&self.folder))
            .map_ok(|meta| meta.location)
            .try_collect()
            .await?;
        let mut letters: Vec<DeadLetter> = futures::stream::iter(paths)
            .map(|path| async move {
                let bytes = self.store.get(&path).await?.bytes().await?;
                let key = path.filename().unwrap_or_default().to_owned();
                Ok::<_, object_store::Error>(DeadLetter::decode(&key, &bytes))
            })
            .buffer_unordered(CONCURRENCY)
            .try_filter_map(|letter| async move { Ok(letter) })
            .try_collect()
            .await?;
        letters.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(letters)
    }

    /// Deletes the letters stored more than `retention` before `now` whose
    /// records `read` says a committed checkpoint has read past; returns
    /// how many it deleted. A letter is rewritten when its record is read
    /// again, which starts its time anew.
    pub async fn expire(
        &self,
        retention: Duration,
        now: SystemTime,
        read: impl Fn(&DeadLetter) -> bool,
    ) -> object_store::Result<usize> {
        let Some(cutoff) = now
            .checked_sub(retention)
            .and_then(|cutoff| cutoff.duration_since(SystemTime::UNIX_EPOCH).ok())
        else {
            return Ok(0);
        };
        let cutoff = i64::try_from(cutoff.as_millis()).unwrap_or(i64::MAX);
        let old: Vec<Path> = self
            .store
            .list(Some(&self.folder))
            .try_filter_map(|meta| async move {
                Ok((meta.last_modified.timestamp_millis() < cutoff).then_some(meta.location))
            })
            .try_collect()
            .await?;
        let read = &read;
        let expired: Vec<Path> = futures::stream::iter(old)
            .map(|path| async move {
                let bytes = self.store.get(&path).await?.bytes().await?;
                let key = path.filename().unwrap_or_default().to_owned();
                let expired = DeadLetter::decode(&key, &bytes).is_none_or(|letter| read(&letter));
                Ok::<_, object_store::Error>(expired.then_some(path))
            })
            .buffer_unordered(CONCURRENCY)
            .try_filter_map(|path| async move { Ok(path) })
            .try_collect()
            .await?;
        let count = expired.len();
        self.store
            .delete_stream(futures::stream::iter(expired.into_iter().map(Ok)).boxed())
            .try_collect::<Vec<_>>()
            .await?;
        Ok(count)
    }

    /// Deletes every stored dead letter (the source was dropped).
    pub async fn clear(&self) -> object_store::Result<()> {
        let paths = self
            .store
            .list(Some(&self.folder))
            .map_ok(|meta| meta.location)
            .boxed();
        self.store
            .delete_stream(paths)
            .try_collect::<Vec<_>>()
            .await
            .map(|_| ())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn letter(key: &str, value: &[u8]) -> DeadLetter {
        DeadLetter {
            key: key.to_owned(),
            place: format!("place of {key}"),
            error: "does not parse".to_owned(),
            value: value.to_vec(),
            passed_at: Some((1, 10)),
        }
    }

    #[tokio::test]
    async fn letters_are_kept_once_per_place_and_cleared() {
        let store: Arc<dyn ObjectStore> = Arc::new(object_store::memory::InMemory::new());
        let letters = DeadLetterBox::new(store.clone(), Path::from("dead_letters/7"));
        let other = DeadLetterBox::new(store, Path::from("dead_letters/8"));
        letters
            .put(vec![
                letter("b", b"{\"x\": oops}\n"),
                letter("a", &[0, 255]),
            ])
            .await
            .unwrap();
        // Read again (a replay): the same places, the same objects.
        letters.put(vec![letter("a", &[0, 255])]).await.unwrap();
        other.put(vec![letter("c", b"")]).await.unwrap();
        assert_eq!(
            letters.list().await.unwrap(),
            [letter("a", &[0, 255]), letter("b", b"{\"x\": oops}\n")]
        );
        let root = DeadLetterBox::new(letters.store.clone(), Path::from("dead_letters"));
        assert_eq!(root.folders().await.unwrap(), ["7", "8"]);
        letters.clear().await.unwrap();
        assert!(letters.list().await.unwrap().is_empty());
        assert_eq!(other.list().await.unwrap().len(), 1);
    }

    #[test]
    fn a_letter_is_read_once_its_split_passes_its_record() {
        let kept = letter("a", b"x");
        assert!(!kept.read_by(&[]));
        assert!(!kept.read_by(&[20, 9]));
        assert!(kept.read_by(&[0, 10]));
        assert!(kept.read_by(&[0, 11]));
        let older = DeadLetter {
            passed_at: None,
            ..letter("b", b"y")
        };
        assert!(older.read_by(&[]));
        // Stored and read back, with and without a split position.
        for letter in [kept, older] {
            assert_eq!(
                DeadLetter::decode(&letter.key, &letter.encode()),
                Some(letter)
            );
        }
    }

    #[tokio::test]
    async fn letters_past_their_retention_go_once_read() {
        let store: Arc<dyn ObjectStore> = Arc::new(object_store::memory::InMemory::new());
        let letters = DeadLetterBox::new(store, Path::from("dead_letters/7"));
        letters
            .put(vec![letter("a", b"1"), letter("b", b"2")])
            .await
            .unwrap();
        let hour = Duration::from_secs(3600);
        let now = SystemTime::now();
        // Younger than the retention: kept.
        assert_eq!(letters.expire(hour, now, |_| true).await.unwrap(), 0);
        // Older, but not yet read past by a committed epoch: kept.
        let later = now + 2 * hour;
        assert_eq!(letters.expire(hour, later, |_| false).await.unwrap(), 0);
        assert_eq!(
            letters
                .expire(hour, later, |letter| letter.key == "a")
                .await
                .unwrap(),
            1
        );
        let left: Vec<String> = letters
            .list()
            .await
            .unwrap()
            .into_iter()
            .map(|letter| letter.key)
            .collect();
        assert_eq!(left, ["b"]);
    }

    #[test]
    fn retention_needs_dead_letters_and_a_duration() {
        let options = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        assert_eq!(retention(&options(&[])), Ok(None));
        assert_eq!(
            retention(&options(&[
                ("bad_records", "dead_letter"),
                (RETENTION_OPTION, "7d")
            ])),
            Ok(Some(Duration::from_secs(7 * 86_400)))
        );
        let skip = retention(&options(&[
            ("bad_records", "skip"),
            (RETENTION_OPTION, "1h"),
        ]));
        assert!(skip
            .unwrap_err()
            .contains("needs bad_records = 'dead_letter'"));
        let bad = retention(&options(&[
            ("bad_records", "dead_letter"),
            (RETENTION_OPTION, "a while"),
        ]));
        assert!(bad.unwrap_err().contains("is not a duration"));
    }
}
