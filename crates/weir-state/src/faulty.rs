//! A fault-injecting `ObjectStore` for tests: puts or gets of chosen paths
//! fail while a fault is switched on, and puts can be slowed down.

use std::fmt;
use std::ops::Range;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use bytes::Bytes;
use futures::stream::BoxStream;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMultipartOptions, PutOptions, PutPayload, PutResult, Result,
};

/// Which operations fail.
#[derive(Debug, Clone, Default)]
pub struct Faults {
    /// Puts to paths containing this text fail.
    pub put: Option<String>,
    /// Gets of paths containing this text fail.
    pub get: Option<String>,
    /// Every put takes this long (a slow store).
    pub put_delay: Option<std::time::Duration>,
}

/// Wraps a store and fails the operations [`Faults`] names.
#[derive(Debug)]
pub struct FaultyStore {
    inner: Arc<dyn ObjectStore>,
    faults: Arc<Mutex<Faults>>,
}

impl FaultyStore {
    /// A wrapper around `inner` and the switch that controls its faults.
    pub fn new(inner: Arc<dyn ObjectStore>) -> (Arc<Self>, Arc<Mutex<Faults>>) {
        let faults = Arc::new(Mutex::new(Faults::default()));
        (
            Arc::new(FaultyStore {
                inner,
                faults: faults.clone(),
            }),
            faults,
        )
    }

    fn check(&self, pattern: Option<String>, location: &Path) -> Result<()> {
        match pattern {
            Some(p) if location.as_ref().contains(&p) => Err(object_store::Error::Generic {
                store: "faulty",
                source: format!("injected fault on {location}").into(),
            }),
            _ => Ok(()),
        }
    }
}

impl fmt::Display for FaultyStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "FaultyStore({})", self.inner)
    }
}

#[async_trait]
impl ObjectStore for FaultyStore {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> Result<PutResult> {
        let (pattern, delay) = {
            let faults = self.faults.lock().unwrap();
            (faults.put.clone(), faults.put_delay)
        };
        if let Some(delay) = delay {
            tokio::time::sleep(delay).await;
        }
        self.check(pattern, location)?;
        self.inner.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> Result<Box<dyn MultipartUpload>> {
        let pattern = self.faults.lock().unwrap().put.clone();
        self.check(pattern, location)?;
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        let pattern = self.faults.lock().unwrap().get.clone();
        self.check(pattern, location)?;
        self.inner.get_opts(location, options).await
    }

    async fn get_ranges(&self, location: &Path, ranges: &[Range<u64>]) -> Result<Vec<Bytes>> {
        let pattern = self.faults.lock().unwrap().get.clone();
        self.check(pattern, location)?;
        self.inner.get_ranges(location, ranges).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, Result<Path>>,
    ) -> BoxStream<'static, Result<Path>> {
        self.inner.delete_stream(locations)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        self.inner.list(prefix)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> Result<()> {
        self.inner.copy_opts(from, to, options).await
    }
}
