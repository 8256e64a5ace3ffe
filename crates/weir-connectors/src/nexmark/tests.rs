//! The generator's rules, checked on generated events.

use std::collections::BTreeMap;

use datafusion::arrow::array::{Array, AsArray, RecordBatch};
use datafusion::arrow::compute::concat_batches;
use datafusion::arrow::datatypes::{DataType, Int64Type, TimestampMicrosecondType};

use super::*;
use crate::paced::RowGenerator;

/// Event 0's time: 2023-11-14 22:13:20 UTC.
const BASE_MILLIS: i64 = 1_700_000_000_000;

fn spec(table: &str, extra: &[(&str, &str)]) -> NexmarkSpec {
    let mut options: BTreeMap<String, String> = [
        ("nexmark.table.type", table),
        ("nexmark.base.time", &BASE_MILLIS.to_string()),
    ]
    .iter()
    .chain(extra)
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    options.retain(|_, v| !v.is_empty());
    let schema = table_schema(&options).expect("a table type");
    NexmarkSpec::new(schema, &options, 0).expect("valid options")
}

fn ints(batch: &RecordBatch, column: &str) -> Vec<i64> {
    let array = batch.column_by_name(column).expect("column");
    array.as_primitive::<Int64Type>().values().to_vec()
}

fn texts(batch: &RecordBatch, column: &str) -> Vec<String> {
    let array = batch.column_by_name(column).expect("column");
    array
        .as_string::<i32>()
        .iter()
        .map(|s| s.expect("not null").to_owned())
        .collect()
}

fn times(batch: &RecordBatch, column: &str) -> Vec<i64> {
    let array = batch.column_by_name(column).expect("column");
    array
        .as_primitive::<TimestampMicrosecondType>()
        .values()
        .to_vec()
}

#[test]
fn events_come_in_the_standard_mix_at_the_event_rate() {
    let events = 0..50_000;
    let person = spec("person", &[]).generate(events.clone(), None);
    let auction = spec("auction", &[]).generate(events.clone(), None);
    let bid = spec("bid", &[]).generate(events, None);
    assert_eq!(person.num_rows(), 1_000);
    assert_eq!(auction.num_rows(), 3_000);
    assert_eq!(bid.num_rows(), 46_000);
    // 10,000 events per second: event n at n * 100 microseconds.
    let base = BASE_MILLIS * 1000;
    assert_eq!(&times(&person, "date_time")[..2], &[base, base + 50 * 100]);
    assert_eq!(
        &times(&auction, "date_time")[..4],
        &[base + 100, base + 200, base + 300, base + 5100]
    );
    assert_eq!(times(&bid, "date_time")[0], base + 400);
    // Person and auction ids count up from 1000 with the events.
    let ids = ints(&person, "id");
    assert!(ids.iter().copied().eq(1000..2000), "person ids");
    let ids = ints(&auction, "id");
    assert!(ids.iter().copied().eq(1000..4000), "auction ids");
}

#[test]
fn references_point_at_people_and_auctions_created_or_about_to_be() {
    let spec = spec(
        "bid",
        &[
            ("nexmark.active.people", "50"),
            ("nexmark.in.flight.auctions", "30"),
        ],
    );
    let events: Vec<u64> = (0..200_000).collect();
    let bid = spec.generate(0..200_000, None);
    let bids: Vec<u64> = events.into_iter().filter(|&n| n % 50 >= 4).collect();
    let (auctions, bidders) = (ints(&bid, "auction"), ints(&bid, "bidder"));
    let (mut hot_auctions, mut hot_bidders) = (0, 0);
    for ((&n, &auction), &bidder) in bids.iter().zip(&auctions).zip(&bidders) {
        let last_person = (n / 50) as i64 + 1000;
        let last_auction = (n / 50 * 3 + 2) as i64 + 1000;
        assert!(
            (1000..=last_auction + 10).contains(&auction),
            "event {n}: auction {auction}"
        );
        assert!(
            (1000..=last_person + 10).contains(&bidder),
            "event {n}: bidder {bidder}"
        );
        // Others come from the 30 latest auctions, the 50 latest people.
        let hot_auction = (last_auction - 1000) / 100 * 100 + 1000;
        if auction == hot_auction {
            hot_auctions += 1;
        } else {
            assert!(auction >= last_auction - 30, "event {n}: auction {auction}");
        }
        let hot_bidder = (last_person - 1000) / 100 * 100 + 1001;
        if bidder == hot_bidder {
            hot_bidders += 1;
        } else {
            assert!(bidder > last_person - 50, "event {n}: bidder {bidder}");
        }
    }
    // Half the bids go to a hot auction, three in four come from a hot
    // bidder (plus the random picks that happen to hit them).
    let share = |count: usize| count as f64 / bids.len() as f64;
    assert!(
        (0.49..0.53).contains(&share(hot_auctions)),
        "{}",
        share(hot_auctions)
    );
    assert!(
        (0.74..0.77).contains(&share(hot_bidders)),
        "{}",
        share(hot_bidders)
    );
}

#[test]
fn values_stay_in_their_ranges_and_extra_pads_to_the_standard_size() {
    let bid = spec("bid", &[]).generate(0..100_000, None);
    let prices = ints(&bid, "price");
    assert!(prices.iter().all(|p| (100..=100_000_000).contains(p)));
    let channels = texts(&bid, "channel");
    let hot = channels
        .iter()
        .filter(|c| ["Google", "Facebook", "Baidu", "Apple"].contains(&c.as_str()))
        .count();
    assert!(
        (0.49..0.51).contains(&(hot as f64 / channels.len() as f64)),
        "{hot}"
    );
    let urls = texts(&bid, "url");
    assert!(urls
        .iter()
        .all(|u| u.starts_with("https://www.nexmark.com/")));
    let average = |values: &[String]| {
        values.iter().map(String::len).sum::<usize>() as f64 / values.len() as f64
    };
    // A bid's fixed fields count 32 bytes of its 100.
    assert!((67.0..69.0).contains(&average(&texts(&bid, "extra"))));

    let auction = spec("auction", &[]).generate(0..100_000, None);
    assert!((331.0..333.0).contains(&average(&texts(&auction, "extra"))));
    assert!(texts(&auction, "item_name").iter().all(|s| s.len() == 20));
    assert!(texts(&auction, "description")
        .iter()
        .all(|s| s.len() == 100));
    let (initial, reserve) = (ints(&auction, "initial_bid"), ints(&auction, "reserve"));
    assert!(initial.iter().zip(&reserve).all(|(i, r)| r > i));
    let (starts, expires) = (times(&auction, "date_time"), times(&auction, "expires"));
    assert!(starts.iter().zip(&expires).all(|(s, e)| e > s));
    assert!(ints(&auction, "category")
        .iter()
        .all(|c| (10..15).contains(c)));

    let person = spec("person", &[]).generate(0..100_000, None);
    let cards = texts(&person, "credit_card");
    assert!(cards
        .iter()
        .all(|c| c.len() == 19 && c.split(' ').count() == 4));
    assert!(texts(&person, "email_address")
        .iter()
        .all(|e| e.len() == 17 && e.ends_with(".com")));
    let sizes: Vec<usize> = (0..person.num_rows())
        .map(|i| {
            ["name", "city"]
                .iter()
                .map(|c| texts(&person, c)[i].len())
                .sum::<usize>()
                + 8
                + 17
                + 19
                + 2
                + texts(&person, "extra")[i].len()
        })
        .collect();
    let mean = sizes.iter().sum::<usize>() as f64 / sizes.len() as f64;
    assert!((198.0..202.0).contains(&mean), "{mean}");
}

#[test]
fn any_range_of_events_is_the_same_events_and_unread_columns_are_not_computed() {
    for table in ["person", "auction", "bid"] {
        let spec = spec(table, &[("nexmark.seed", "7")]);
        let whole = spec.generate(1_000..9_000, None);
        let parts: Vec<RecordBatch> = [1_000..1_003, 1_003..5_555, 5_555..9_000]
            .into_iter()
            .map(|range| spec.generate(range, None))
            .collect();
        assert_eq!(
            concat_batches(spec.schema(), &parts).expect("concat"),
            whole,
            "{table}"
        );

        // Only the last column read: it alone has its values.
        let columns = spec.schema().fields().len();
        let mut read = vec![false; columns];
        read[columns - 1] = true;
        let partial = spec.generate(1_000..9_000, Some(&read));
        assert_eq!(partial.column(columns - 1), whole.column(columns - 1));
        assert_ne!(partial.column(0), whole.column(0), "{table}");
    }
    // Another seed, other values; the same ids.
    let (seven, zero) = (
        spec("bid", &[("nexmark.seed", "7")]).generate(0..1000, None),
        spec("bid", &[]).generate(0..1000, None),
    );
    assert_ne!(ints(&seven, "price"), ints(&zero, "price"));
}

#[test]
fn declared_columns_are_checked_and_may_narrow_the_stream() {
    let options: BTreeMap<String, String> = [("nexmark.table.type", "bid")]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let schema = |fields: Vec<(&str, DataType)>| {
        std::sync::Arc::new(datafusion::arrow::datatypes::Schema::new(
            fields
                .into_iter()
                .map(|(n, t)| datafusion::arrow::datatypes::Field::new(n, t, false))
                .collect::<Vec<_>>(),
        ))
    };
    let narrow = NexmarkSpec::new(
        schema(vec![
            ("price", DataType::Int64),
            ("channel", DataType::Utf8View),
        ]),
        &options,
        0,
    )
    .expect("a subset of the columns");
    let batch = narrow.generate(0..100, None);
    assert_eq!(batch.num_columns(), 2);
    assert_eq!(batch.column(1).data_type(), &DataType::Utf8View);
    let full = spec("bid", &[]).generate(0..100, None);
    assert_eq!(ints(&batch, "price"), ints(&full, "price"));

    let error = |fields, options: &BTreeMap<String, String>| {
        NexmarkSpec::new(schema(fields), options, 0)
            .expect_err("refused")
            .to_string()
    };
    assert!(error(vec![("foo", DataType::Int64)], &options).contains("has no column \"foo\""));
    assert!(error(vec![("price", DataType::Int32)], &options).contains("must be bigint"));
    let mut bad = options.clone();
    bad.insert("nexmark.emit.rate".into(), "0".into());
    assert!(error(vec![], &bad).contains("positive integer"));
    bad.insert("nexmark.emit.rate".into(), "1".into());
    bad.insert("nexmark.table.type".into(), "bids".into());
    assert!(error(vec![], &bad).contains("person, auction or bid"));
}
