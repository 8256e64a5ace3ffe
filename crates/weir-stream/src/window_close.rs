//! The window of a grouped aggregate or of a top-N per window: a group
//! (or partition) column bounded by a watermark (see
//! [`crate::watermark`]). Groups below the bound are final: their rows
//! are late from then on, and the operator frees them (an aggregate with
//! `EMIT ON WINDOW CLOSE` emits them then).

use std::collections::BTreeMap;

use datafusion::arrow::array::ArrayRef;
use weir_state::KeyId;

use crate::watermark::{at_or_above, drop_late, event_times, ColumnBound, Watermarks};
use crate::{Changes, Result};

/// The window column's state; `K` names a group (an interned key's id,
/// or a partition's encoded values).
#[derive(Debug)]
pub(crate) struct Windows<K = KeyId> {
    /// The group column that holds the window.
    pub column: usize,
    bound: ColumnBound,
    /// Groups whose window value is below it are closed.
    closed: Option<i64>,
    /// Groups by window value, since they were registered. A group freed
    /// and its id reused stays listed under its old value too: ids are
    /// checked against their current value when the window closes.
    open: BTreeMap<i64, Vec<K>>,
    /// Rows dropped as late since the operator started.
    pub late: u64,
}

impl<K: Ord> Windows<K> {
    /// The window of group column `column`, bounded by `bound`.
    pub fn new(column: usize, bound: ColumnBound) -> Self {
        Windows {
            column,
            bound,
            closed: None,
            open: BTreeMap::new(),
            late: 0,
        }
    }

    /// Drops the rows of `input` whose window (`values`) is closed;
    /// `counts`: the column of the rows each input row stands for (a
    /// partial aggregate's row count), else its weight.
    pub fn drop_late(
        &mut self,
        input: Changes,
        values: &ArrayRef,
        counts: Option<usize>,
    ) -> Result<Changes> {
        let Some(closed) = self.closed else {
            return Ok(input);
        };
        let (kept, late) = drop_late(input, values, closed, counts)?;
        self.late += late;
        Ok(kept)
    }

    /// Lists new groups under their window values.
    pub fn register(
        &mut self,
        groups: impl IntoIterator<Item = K>,
        values: &ArrayRef,
    ) -> Result<()> {
        let times = event_times(values)?;
        for (group, time) in groups.into_iter().zip(times.iter()) {
            // A NULL window never closes.
            if let Some(time) = time {
                self.open.entry(time).or_default().push(group);
            }
        }
        Ok(())
    }

    /// Moves the bound to where `watermarks` put it; returns the groups
    /// it closed: those listed below it that are still `listed` (an id
    /// freed and handed out again is listed under its old value too) and
    /// whose window value, in their key columns (`decode`), is below it.
    pub fn closing(
        &mut self,
        watermarks: &Watermarks,
        listed: impl Fn(&K) -> bool,
        decode: impl FnOnce(&[K]) -> Result<Vec<ArrayRef>>,
    ) -> Result<Vec<K>> {
        let Some((bound, groups)) = self.close(watermarks)? else {
            return Ok(Vec::new());
        };
        let mut groups: Vec<K> = groups.into_iter().filter(|g| listed(g)).collect();
        groups.sort_unstable();
        groups.dedup();
        if groups.is_empty() {
            return Ok(groups);
        }
        let values = decode(&groups)?;
        let open = at_or_above(&values[self.column], bound)?;
        Ok(groups
            .into_iter()
            .zip(open.values().iter())
            .filter_map(|(g, open)| (!open).then_some(g))
            .collect())
    }

    /// Moves the bound to where `watermarks` put it; returns the new bound
    /// and the groups listed below it, if it moved.
    fn close(&mut self, watermarks: &Watermarks) -> Result<Option<(i64, Vec<K>)>> {
        let Some(bound) = self.bound.value(watermarks)? else {
            return Ok(None);
        };
        if self.closed.is_some_and(|c| c >= bound) {
            return Ok(None);
        }
        self.closed = Some(bound);
        let still_open = self.open.split_off(&bound);
        let closing = std::mem::replace(&mut self.open, still_open);
        Ok(Some((bound, closing.into_values().flatten().collect())))
    }

    /// Bytes its lists take (not what a `K` owns on the heap).
    pub fn memory_size(&self) -> usize {
        self.open
            .values()
            .map(|g| g.capacity() * std::mem::size_of::<K>() + 48)
            .sum()
    }
}
