//! Weir: rows that wait for later ones leave first.

use futures::future::FutureExt;
use futures::sink::{Sink, SinkExt};
use futures::stream::{Stream, StreamExt};

use crate::error::{PgWireError, PgWireResult};
use crate::messages::PgWireBackendMessage;

/// The next item of `stream`. When it is not ready and `fed` says rows
/// were fed since the last flush, they are flushed first, so that the
/// client sees them while the stream waits (a subscription's rows wait
/// for the next epoch). Responses whose rows are ready still leave in one
/// write at the end.
pub(crate) async fn next_flushing<S, C>(
    stream: &mut S,
    client: &mut C,
    fed: bool,
) -> PgWireResult<Option<S::Item>>
where
    S: Stream + Unpin,
    C: Sink<PgWireBackendMessage> + Unpin,
    PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
{
    if let Some(item) = stream.next().now_or_never() {
        return Ok(item);
    }
    if fed {
        client.flush().await?;
    }
    Ok(stream.next().await)
}
