//! A panic (a bug) while a statement runs or while its rows are written
//! becomes that statement's XX000 error: the client keeps its connection,
//! and every other session goes on.

use std::any::Any;

use pgwire::error::PgWireResult;

use crate::error::WeirError;

/// What a panic said.
pub(crate) fn message(panic: &(dyn Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into())
}

/// `rows` (encoded as they are taken), ended by an XX000 error if
/// encoding one panics.
pub(crate) fn guard_rows<T>(
    rows: impl Iterator<Item = PgWireResult<T>>,
) -> impl Iterator<Item = PgWireResult<T>> {
    let mut rows = Some(rows);
    std::iter::from_fn(move || {
        let inner = rows.as_mut()?;
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| inner.next())) {
            Ok(next) => next,
            Err(panic) => {
                rows = None;
                let message = message(panic.as_ref());
                tracing::error!(%message, "writing a result's rows panicked");
                Some(Err(WeirError::internal(format!(
                    "writing the rows panicked: {message}"
                ))
                .into()))
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panicking_row_ends_the_rows_with_an_error() {
        let rows = (0..5).map(|i| {
            assert!(i != 2, "row {i} cannot be encoded");
            Ok::<_, pgwire::error::PgWireError>(i)
        });
        let taken: Vec<_> = guard_rows(rows).collect();
        assert_eq!(taken.len(), 3, "two rows, then the error, then nothing");
        assert!(matches!(taken[1], Ok(1)));
        let error = taken[2].as_ref().unwrap_err().to_string();
        assert!(error.contains("row 2 cannot be encoded"), "{error}");
    }
}
