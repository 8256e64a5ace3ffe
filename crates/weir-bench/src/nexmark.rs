//! `weir-bench nexmark`: one Nexmark query (`sql-tests/nexmark/qN.sql`) as
//! a materialized view over the `nexmark` connector's person, auction and
//! bid sources, run until every event of a bounded stream went through it.
//!
//! The stream has `--events` events in Nexmark's standard mix (of every 50:
//! 1 person, 3 auctions, 46 bids), replayed as fast as the view takes them;
//! the figures count every event of the stream, as Nexmark reports them,
//! whichever of the three kinds the query reads. A source generates only
//! its own kind's events, and only the columns the view reads: a query
//! over bids alone does not pay for generating people and auctions (the
//! Flink kit's generator builds every event whole and drops those a query
//! does not read). Runs, CPU time and memory are taken as by `stream`
//! (`stream.rs`). The sources have the Flink kit's watermark, 4 seconds
//! behind the latest event time, so windows close and free their state.

use std::collections::BTreeMap;

use crate::stream::Workload;

/// The queries, by name, as `sql-tests/nexmark` holds them.
pub const QUERIES: &[(&str, &str)] = &[
    ("q0", include_str!("../../../sql-tests/nexmark/q0.sql")),
    ("q1", include_str!("../../../sql-tests/nexmark/q1.sql")),
    ("q2", include_str!("../../../sql-tests/nexmark/q2.sql")),
    ("q3", include_str!("../../../sql-tests/nexmark/q3.sql")),
    ("q4", include_str!("../../../sql-tests/nexmark/q4.sql")),
    ("q5", include_str!("../../../sql-tests/nexmark/q5.sql")),
    ("q6", include_str!("../../../sql-tests/nexmark/q6.sql")),
    ("q7", include_str!("../../../sql-tests/nexmark/q7.sql")),
    ("q8", include_str!("../../../sql-tests/nexmark/q8.sql")),
    ("q9", include_str!("../../../sql-tests/nexmark/q9.sql")),
    ("q10", include_str!("../../../sql-tests/nexmark/q10.sql")),
    ("q11", include_str!("../../../sql-tests/nexmark/q11.sql")),
    ("q12", include_str!("../../../sql-tests/nexmark/q12.sql")),
    ("q13", include_str!("../../../sql-tests/nexmark/q13.sql")),
    ("q14", include_str!("../../../sql-tests/nexmark/q14.sql")),
    ("q15", include_str!("../../../sql-tests/nexmark/q15.sql")),
    ("q16", include_str!("../../../sql-tests/nexmark/q16.sql")),
    ("q17", include_str!("../../../sql-tests/nexmark/q17.sql")),
    ("q18", include_str!("../../../sql-tests/nexmark/q18.sql")),
    ("q19", include_str!("../../../sql-tests/nexmark/q19.sql")),
    ("q20", include_str!("../../../sql-tests/nexmark/q20.sql")),
    ("q21", include_str!("../../../sql-tests/nexmark/q21.sql")),
    ("q22", include_str!("../../../sql-tests/nexmark/q22.sql")),
];

/// q13's side input table.
const SIDE_INPUT: &str = include_str!("../../../sql-tests/nexmark/side_input.sql");

/// Events of each kind among the first `events`: event `n` is a person
/// when `n % 50 == 0`, an auction when it is 1 to 3, a bid otherwise.
fn kinds(events: u64) -> BTreeMap<String, u64> {
    let count = |kinds: std::ops::Range<u64>| {
        (events / 50) * (kinds.end - kinds.start) + (events % 50).clamp(kinds.start, kinds.end)
            - kinds.start
    };
    BTreeMap::from([
        ("person".to_string(), count(0..1)),
        ("auction".to_string(), count(1..4)),
        ("bid".to_string(), count(4..50)),
    ])
}

/// Query `name` over a stream of `events` events, as a view or as a
/// blackhole sink (q10, "log to file system", as a file sink into a
/// fresh folder: it exists to measure writing every bid out).
pub fn workload(name: &str, events: u64, blackhole: bool) -> anyhow::Result<Workload> {
    let query = crate::stream::find_query(QUERIES, name)?;
    let mut setup = String::new();
    for kind in ["person", "auction", "bid"] {
        setup.push_str(&format!(
            "CREATE SOURCE {kind} (WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND)
               WITH (connector = 'nexmark', nexmark.table.type = '{kind}',
               nexmark.event.num = '{events}', nexmark.emit.rate = '1000000000',
               nexmark.base.time = '1700000000000');"
        ));
    }
    setup.push_str(SIDE_INPUT);
    let summary = query
        .lines()
        .next()
        .and_then(|line| line.strip_prefix("-- "))
        .unwrap_or(name);
    Ok(Workload {
        title: format!("nexmark: {events} events, {summary}"),
        setup,
        query: query.to_string(),
        events,
        source_rows: kinds(events),
        update_auctions: false,
        check: None,
        blackhole,
        file_sink: (name == "q10" && blackhole)
            .then(|| std::env::temp_dir().join(format!("weir-bench-q10-{}", std::process::id()))),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_count_the_standard_mix() {
        for events in [0, 1, 2, 4, 5, 49, 50, 51, 54, 1_000_003] {
            let kinds = kinds(events);
            assert_eq!(kinds.values().sum::<u64>(), events, "{events}");
            let by_rule =
                |rule: fn(u64) -> bool| (0..events).filter(|&n| rule(n % 50)).count() as u64;
            assert_eq!(kinds["person"], by_rule(|r| r == 0), "{events}");
            assert_eq!(
                kinds["auction"],
                by_rule(|r| (1..4).contains(&r)),
                "{events}"
            );
        }
    }
}
