//! What generated sources share: rows that are a pure function of their
//! index in the source's order, so that a reader can start at any row
//! after a crash and produce exactly what it would have produced.

use std::ops::Range;

use datafusion::arrow::array::ArrayRef;
use datafusion::arrow::datatypes::DataType;

pub(crate) const MICROS_PER_SECOND: i128 = 1_000_000;

/// SplitMix64's finalizer: a bijection on `u64` that scatters every input bit
/// over the whole output.
pub(crate) fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The `i`th pseudo-random draw of the stream `seed`, computed without
/// drawing the ones before it.
pub(crate) fn draw(seed: u64, i: u64) -> u64 {
    mix(seed.wrapping_add(i.wrapping_mul(0x9E37_79B9_7F4A_7C15)))
}

/// `len` zeros (empty strings, false) of `data_type`, without NULLs: the
/// column a view does not read. Costs zeroed buffers, no computation.
pub(crate) fn placeholder(data_type: &DataType, len: usize) -> ArrayRef {
    let nulls = datafusion::arrow::array::new_null_array(data_type, len);
    let data = nulls.to_data().into_builder().nulls(None).null_count(0);
    datafusion::arrow::array::make_array(
        data.build()
            .expect("a null array's zeroed buffers are valid values"),
    )
}

/// The event time of each row of `rows`, `start + i * 1e6 / rate`
/// microseconds (rounded down), stepping from one row to the next without
/// a division per row.
pub(crate) fn event_times(start: i64, rate: u64, rows: Range<u64>) -> impl Iterator<Item = i128> {
    let rate = u128::from(rate);
    let micros = MICROS_PER_SECOND as u128;
    let first = u128::from(rows.start) * micros;
    let (mut whole, mut part) = (first / rate, first % rate);
    let (step, step_part) = (micros / rate, micros % rate);
    rows.map(move |_| {
        let value = i128::from(start) + whole as i128;
        whole += step;
        part += step_part;
        if part >= rate {
            whole += 1;
            part -= rate;
        }
        value
    })
}

/// The event time of row `i`: `start + i * 1e6 / rate` microseconds,
/// rounded down, as [`event_times`] steps to it.
pub(crate) fn event_time(start: i64, rate: u64, i: u64) -> i128 {
    let offset = match i.checked_mul(MICROS_PER_SECOND as u64) {
        Some(micros) => u128::from(micros / rate),
        None => u128::from(i) * MICROS_PER_SECOND as u128 / u128::from(rate),
    };
    i128::from(start) + offset as i128
}
