use datafusion::arrow::error::ArrowError;

/// Errors of the state layer.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// The object store failed (I/O, network, permissions).
    #[error("object store error: {0}")]
    ObjectStore(#[from] object_store::Error),
    /// Encoding or decoding Arrow data failed.
    #[error("arrow error: {0}")]
    Arrow(#[from] ArrowError),
    /// A manifest or data object could not be understood.
    #[error("corrupt state object {path}: {reason}")]
    Corrupt {
        /// The object's path.
        path: String,
        /// What was wrong with it.
        reason: String,
    },
    /// The state URL or directory is not usable.
    #[error("invalid state location: {0}")]
    InvalidLocation(String),
    /// The state was written by a newer Weir, in a format this build cannot
    /// read.
    #[error("state written by a newer version of Weir: {0}")]
    Incompatible(String),
    /// A bug: state used in a way its owner never should.
    #[error("internal error in the state layer: {0}")]
    Internal(String),
}

/// Result alias for the state layer.
pub type StateResult<T, E = StateError> = std::result::Result<T, E>;
