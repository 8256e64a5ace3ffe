//! Dead letters: a source's records that do not parse, kept with
//! `bad_records = 'dead_letter'` in a folder of the state store, one
//! object per record, named by where the record was (a Kafka partition
//! and offset, a file's ordinal and byte).
//!
//! A reader stores a batch's dead letters before it hands over the rows
//! after them, so a checkpoint's positions never pass a record whose dead
//! letter is not stored: none is lost. A reader that reads the record
//! again (after a crash, or a second view's reader) writes the same
//! object again: none is kept twice.

use std::sync::Arc;

use futures::{StreamExt, TryStreamExt};
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};

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
}

impl DeadLetter {
    fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(&serde_json::json!({
            "place": self.place,
            "error": self.error,
            "value": hex::encode(&self.value),
        }))
        .expect("a JSON object serializes")
    }

    fn decode(key: &str, bytes: &[u8]) -> Option<DeadLetter> {
        let object: serde_json::Value = serde_json::from_slice(bytes).ok()?;
        Some(DeadLetter {
            key: key.to_owned(),
            place: object.get("place")?.as_str()?.to_owned(),
            error: object.get("error")?.as_str()?.to_owned(),
            value: hex::decode(object.get("value")?.as_str()?).ok()?,
        })
    }
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
}
