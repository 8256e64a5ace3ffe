//! Kafka sources and sinks against a real Kafka-protocol broker (nisshi,
//! see `kafka_broker`): every record read once through SIGKILL cycles of
//! the server, the startup modes, formats and bad records, the errors
//! `CREATE SOURCE` and `CREATE SINK` give, sinks whose topics hold each
//! committed epoch once (exactly-once) or at least once through SIGKILL
//! cycles, and sources and sinks that ride out a broker restart.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use tokio_postgres::Client;

use crate::common::{create_views, sorted_rows, sqlstate, wait_until, TestServer};
use crate::kafka_broker::Broker;
use crate::kafka_wire::{Record, Session};
use crate::orders::{produce, total_rows};
use crate::sinks::wait_status;

/// The `WITH (...)` of a source reading `topic` of `broker`.
fn source_options(broker: &Broker, topic: &str, extra: &str) -> String {
    format!(
        "connector = 'kafka', topic = '{topic}', properties.bootstrap.server = '{}'{extra}",
        broker.address()
    )
}

/// Waits until `query` answers `expected` on Weir; panics after `limit`.
pub async fn wait_rows(
    weir: &Client,
    query: &str,
    expected: &[Vec<Option<String>>],
    limit: Duration,
) {
    let started = Instant::now();
    loop {
        let held = sorted_rows(weir, query).await;
        if held == expected {
            return;
        }
        if started.elapsed() > limit {
            let errors = sorted_rows(weir, "SELECT * FROM weir_source_errors").await;
            panic!("{query}: Weir holds {held:?}, expected {expected:?}; errors: {errors:?}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

pub fn row(values: &[&str]) -> Vec<Option<String>> {
    values.iter().map(|v| Some(v.to_string())).collect()
}

/// Avro's zigzag varint encoding of `n`.
fn avro_long(n: i64) -> Vec<u8> {
    let mut zigzag = ((n << 1) ^ (n >> 63)) as u64;
    let mut out = Vec::new();
    while zigzag >= 0x80 {
        out.push((zigzag as u8 & 0x7f) | 0x80);
        zigzag >>= 7;
    }
    out.push(zigzag as u8);
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kafka_source_reads_every_record_once_through_sigkill_cycles() {
    let broker = Broker::start().await;
    broker.create_topic("orders", 3).await;
    let mut server = TestServer::start().await;
    let weir = server.client().await;
    weir.batch_execute(&format!(
        "CREATE SOURCE orders (id bigint, customer text, amount bigint) WITH ({})",
        source_options(
            &broker,
            "orders",
            ", format = 'json', bad_records = 'dead_letter'"
        )
    ))
    .await
    .unwrap();
    create_views(
        &weir,
        &[
            (
                "totals",
                "SELECT customer, count(*) AS n, sum(amount) AS total FROM orders GROUP BY customer",
            ),
            ("ids", "SELECT count(*) AS n, count(DISTINCT id) AS ids FROM orders"),
        ],
    )
    .await;

    // A producer writes orders (and now and then a record that is not
    // JSON) while the server is killed and restarted.
    let produced = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let producing = produce(
        &broker,
        "orders",
        7,
        Some(97),
        stop.clone(),
        produced.clone(),
    );
    let mut rng = rand::rngs::StdRng::seed_from_u64(12);
    for _ in 0..5 {
        tokio::time::sleep(Duration::from_millis(rng.random_range(300..900))).await;
        server.restart_after_kill().await;
    }
    stop.store(true, Ordering::Relaxed);
    producing.await.unwrap();
    let n = produced.load(Ordering::Relaxed);
    assert!(n >= 500, "only {n} orders were produced");

    // Every order once: as many rows as orders, each id once, and each
    // customer's sums those of the orders produced.
    let weir = server.client().await;
    wait_rows(
        &weir,
        "SELECT n, ids FROM ids",
        &[row(&[&n.to_string(), &n.to_string()])],
        Duration::from_secs(60),
    )
    .await;
    // Each view reads the topic with readers of its own.
    wait_rows(
        &weir,
        "SELECT customer, n, total FROM totals",
        &total_rows(n, 7),
        Duration::from_secs(60),
    )
    .await;

    // Records that do not parse were left out and counted (since the
    // server last started), and kept as dead letters, each once although
    // two views' readers read them and the server died while they did.
    let producer = broker.producer();
    for _ in 0..3 {
        Broker::send(&producer, "orders", 1, None, "{\"id\": ").await;
    }
    Broker::send(&producer, "orders", 1, None, &format!(r#"{{"id": {n}}}"#)).await;
    let next = (n + 1).to_string();
    wait_rows(
        &weir,
        "SELECT n, ids FROM ids",
        &[row(&[&next, &next])],
        Duration::from_secs(30),
    )
    .await;
    let errors = sorted_rows(
        &weir,
        "SELECT source, bad_records >= 3, last_error FROM weir_source_errors",
    )
    .await;
    assert_eq!(errors[0][0].as_deref(), Some("orders"), "{errors:?}");
    assert_eq!(errors[0][1].as_deref(), Some("t"), "{errors:?}");
    assert!(
        errors[0][2]
            .as_deref()
            .is_some_and(|e| e.contains("partition 1")),
        "{errors:?}"
    );
    let hex = |text: &str| -> String {
        let digits: String = text.bytes().map(|b| format!("{b:02x}")).collect();
        format!("\\x{digits}")
    };
    // Orders 0, 97, 194, ... each came with a record that is not JSON.
    let interleaved = (n - 1) / 97 + 1;
    assert_eq!(
        sorted_rows(
            &weir,
            "SELECT value, count(*), count(DISTINCT place) FROM weir_dead_letters \
             WHERE source = 'orders' GROUP BY value"
        )
        .await,
        [
            row(&[
                &hex("not json {"),
                &interleaved.to_string(),
                &interleaved.to_string()
            ]),
            row(&[&hex("{\"id\": "), "3", "3"]),
        ]
    );
    let places = sorted_rows(
        &weir,
        "SELECT place, error FROM weir_dead_letters WHERE value = '{\"id\": '::bytea",
    )
    .await;
    assert!(
        places.iter().all(|p| p[0]
            .as_deref()
            .is_some_and(|p| p.starts_with("partition 1 offset "))
            && p[1].as_deref().is_some_and(|e| !e.is_empty())),
        "{places:?}"
    );
    // A dropped source's dead letters go with it.
    let folder = server.data_dir.join("dead_letters");
    let stored = || -> usize {
        let sources = std::fs::read_dir(&folder).into_iter().flatten().flatten();
        sources
            .map(|source| std::fs::read_dir(source.path()).map_or(0, |f| f.count()))
            .sum()
    };
    assert_eq!(stored() as u64, interleaved + 3);
    weir.batch_execute("DROP SOURCE orders CASCADE")
        .await
        .unwrap();
    wait_until(Duration::from_secs(10), || stored() == 0).await;
    assert_eq!(stored(), 0, "the dropped source's dead letters are deleted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_sources_start_where_asked_read_csv_and_refuse_what_they_cannot_read() {
    let broker = Broker::start().await;
    broker.create_topic("events", 2).await;
    let producer = broker.producer();
    for i in 0..5 {
        Broker::send(&producer, "events", i % 2, None, &format!("{i},old")).await;
    }
    let server = TestServer::start().await;
    let weir = server.client().await;
    let csv = ", format = 'csv'";
    for (name, extra) in [
        ("from_start", csv.to_owned()),
        ("from_now", format!("{csv}, scan.startup.mode = 'latest'")),
    ] {
        weir.batch_execute(&format!(
            "CREATE SOURCE {name} (n int, label text) WITH ({})",
            source_options(&broker, "events", &extra)
        ))
        .await
        .unwrap();
        weir.batch_execute(&format!(
            "CREATE MATERIALIZED VIEW {name}_count AS SELECT label, count(*) AS c FROM {name} GROUP BY label"
        ))
        .await
        .unwrap();
    }
    // The latest reader has pinned its start once its view committed.
    tokio::time::sleep(Duration::from_millis(500)).await;
    for i in 5..8 {
        Broker::send(&producer, "events", i % 2, None, &format!("{i},new\n")).await;
    }
    let limit = Duration::from_secs(30);
    wait_rows(
        &weir,
        "SELECT * FROM from_start_count",
        &[row(&["new", "3"]), row(&["old", "5"])],
        limit,
    )
    .await;
    wait_rows(
        &weir,
        "SELECT * FROM from_now_count",
        &[row(&["new", "3"])],
        limit,
    )
    .await;

    // A timestamp start: the records at or after it (records carry
    // their producer's clock; the broker's in-memory storage answers by when
    // it stored them, which here is the same split).
    broker.create_topic("stamped", 1).await;
    Broker::send(&producer, "stamped", 0, None, r#"{"n": 0}"#).await;
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let since = chrono::Utc::now().timestamp_millis();
    tokio::time::sleep(Duration::from_millis(1100)).await;
    for n in 1..3 {
        Broker::send(&producer, "stamped", 0, None, &format!(r#"{{"n": {n}}}"#)).await;
    }
    weir.batch_execute(&format!(
        "CREATE SOURCE stamped (n int) WITH ({}); \
         CREATE MATERIALIZED VIEW stamped_ns AS SELECT n FROM stamped",
        source_options(
            &broker,
            "stamped",
            &format!(
                ", format = 'json', scan.startup.mode = 'timestamp', \
                 scan.startup.timestamp.millis = '{since}'"
            )
        )
    ))
    .await
    .unwrap();
    wait_rows(
        &weir,
        "SELECT n FROM stamped_ns",
        &[row(&["1"]), row(&["2"])],
        limit,
    )
    .await;

    // bad_records = 'fail' (the default): the view stops with the
    // record's partition, offset and error.
    weir.batch_execute(&format!(
        "CREATE SOURCE strict (n int) WITH ({}); \
         CREATE MATERIALIZED VIEW strict_ns AS SELECT n FROM strict",
        source_options(&broker, "stamped", ", format = 'json'")
    ))
    .await
    .unwrap();
    Broker::send(&producer, "stamped", 0, None, "{\"n\": \"many\"}").await;
    let started = Instant::now();
    let failure = loop {
        match weir.simple_query("SELECT n FROM strict_ns").await {
            Err(e) => {
                break e
                    .as_db_error()
                    .map(|e| e.message().to_owned())
                    .unwrap_or_default()
            }
            Ok(_) => {
                assert!(started.elapsed() < limit, "the strict view never failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    };
    assert!(
        failure.contains("partition 0 offset 3") && failure.contains("does not parse"),
        "{failure}"
    );

    // Avro: bare datums of the schema in the options, and datums behind
    // Confluent's header; a value that does not decode is skipped.
    broker.create_topic("avro", 1).await;
    let schema = r#"{"type": "record", "name": "order", "fields": [
        {"name": "id", "type": "long"}, {"name": "customer", "type": ["null", "string"]}]}"#;
    for id in 0..20i64 {
        let mut datum = avro_long(id);
        datum.extend(avro_long(1));
        let customer = format!("c{}", id % 3);
        datum.extend(avro_long(customer.len() as i64));
        datum.extend(customer.as_bytes());
        let framed = [&[0u8, 0, 0, 0, 42][..], &datum].concat();
        let key = format!("k{id}");
        Broker::send(&producer, "avro", 0, Some(&key), &framed).await;
    }
    Broker::send(&producer, "avro", 0, None, &[0u8, 0, 0, 0, 42, 0x80][..]).await;
    weir.batch_execute(&format!(
        "CREATE SOURCE avro_orders (id bigint, customer text) INCLUDE key AS k WITH ({}); \
         CREATE MATERIALIZED VIEW avro_totals AS \
           SELECT customer, count(*) AS n, sum(id) AS ids, sum(length(k)) AS key_bytes \
           FROM avro_orders GROUP BY customer",
        source_options(
            &broker,
            "avro",
            &format!(
                ", format = 'avro-confluent', bad_records = 'skip', avro.schema = '{}'",
                schema.replace('\'', "''")
            )
        )
    ))
    .await
    .unwrap();
    wait_rows(
        &weir,
        "SELECT customer, n, ids, key_bytes FROM avro_totals",
        &[
            // Keys k0..k19: c0 has k0, k3, k6, k9, k12, k15, k18.
            row(&["c0", "7", "63", "17"]),
            row(&["c1", "7", "70", "18"]),
            row(&["c2", "6", "57", "15"]),
        ],
        limit,
    )
    .await;
    let errors = sorted_rows(
        &weir,
        "SELECT bad_records FROM weir_source_errors WHERE source = 'avro_orders'",
    )
    .await;
    assert_eq!(errors, vec![row(&["1"])]);

    // Records' metadata as columns (INCLUDE): partition, offset and
    // timestamp of the CSV records above.
    weir.batch_execute(&format!(
        "CREATE SOURCE with_meta (n int, label text) INCLUDE partition AS p INCLUDE offset \
           INCLUDE timestamp AS ts WITH ({}); \
         CREATE MATERIALIZED VIEW meta AS SELECT p, count(*) AS c, min(_kafka_offset) AS first, \
           max(_kafka_offset) AS last, count(ts) AS stamped FROM with_meta GROUP BY p",
        source_options(&broker, "events", csv)
    ))
    .await
    .unwrap();
    wait_rows(
        &weir,
        "SELECT p, c, first, last, stamped FROM meta",
        &[
            row(&["0", "4", "0", "3", "4"]),
            row(&["1", "4", "0", "3", "4"]),
        ],
        limit,
    )
    .await;
    assert_eq!(
        sqlstate(
            &weir,
            &format!(
                "CREATE SOURCE twice (n int) INCLUDE offset AS n WITH ({})",
                source_options(&broker, "events", csv)
            )
        )
        .await,
        "42701"
    );

    // A librdkafka setting from a secret: the value reaches the consumer
    // (a client id it sends), never the catalog; the secret cannot be
    // dropped while the source names it.
    weir.batch_execute(&format!(
        "CREATE SECRET client AS 'weir-secret-client-id'; \
         CREATE SOURCE secretive (n int, label text) WITH ({}); \
         CREATE MATERIALIZED VIEW secretive_count AS SELECT count(*) AS c FROM secretive",
        source_options(
            &broker,
            "events",
            ", format = 'csv', properties.client.id = SECRET client"
        )
    ))
    .await
    .unwrap();
    wait_rows(
        &weir,
        "SELECT c FROM secretive_count",
        &[row(&["8"])],
        limit,
    )
    .await;
    let shown = sorted_rows(&weir, "SHOW SOURCES").await;
    let secretive = shown
        .iter()
        .find(|r| r[0].as_deref() == Some("secretive"))
        .and_then(|r| r[2].clone())
        .unwrap_or_default();
    assert!(
        secretive.contains("properties.client.id = SECRET client")
            && !secretive.contains("weir-secret-client-id"),
        "{secretive}"
    );
    assert_eq!(sqlstate(&weir, "DROP SECRET client").await, "2BP01");
    weir.batch_execute("CHECKPOINT").await.unwrap();
    assert!(
        !crate::cdc::any_file_holds(&server.data_dir, "weir-secret-client-id"),
        "a secret's value reached the state store"
    );

    // What CREATE SOURCE refuses.
    for (options, state) in [
        (
            source_options(&broker, "missing", ", format = 'json'"),
            "42704",
        ),
        (source_options(&broker, "events", ""), "22023"),
        (
            source_options(&broker, "events", ", format = 'json', colour = 'red'"),
            "22023",
        ),
        (
            "connector = 'kafka', topic = 'events', format = 'json', \
             properties.bootstrap.server = '127.0.0.1:1', properties.socket.timeout.ms = '1000'"
                .to_owned(),
            "08001",
        ),
    ] {
        assert_eq!(
            sqlstate(
                &weir,
                &format!("CREATE SOURCE refused (n int) WITH ({options})")
            )
            .await,
            state,
            "{options}"
        );
    }
}

/// Folds an upsert topic's records: each key's last value, tombstones
/// removing it.
pub(crate) fn upserted(records: &[(Option<String>, Option<String>)]) -> BTreeMap<String, String> {
    let mut state = BTreeMap::new();
    for (key, value) in records {
        let key = key.clone().expect("upsert records have keys");
        match value {
            Some(value) => state.insert(key, value.clone()),
            None => state.remove(&key),
        };
    }
    state
}

/// A transactional producer (an exactly-once sink, Weir's own included)
/// ends every transaction with a marker, an offset that holds no record.
/// A source's position moves past the markers once its consumer has, so
/// that it meets a position pinned at the partition's end (`latest`), and
/// a view created later catches up to the shared reader and joins it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sources_over_transactional_topics_stand_past_the_markers() {
    let broker = Broker::start().await;
    broker.create_topic("moves", 1).await;
    let batch = |first: i32| -> Vec<String> {
        (first..first + 10)
            .map(|id| format!(r#"{{"id": {id}, "amount": {}}}"#, id % 7))
            .collect()
    };
    broker
        .send_in_transactions("moves", &[batch(0), batch(10), batch(20)])
        .await;
    let high = broker.high_watermark("moves", 0);
    // 30 records and 3 markers.
    assert_eq!(high, 33);
    let server = TestServer::start().await;
    let weir = server.client().await;
    weir.batch_execute(&format!(
        "CREATE SOURCE moves (id int, amount int) WITH ({}); \
         CREATE MATERIALIZED VIEW totals AS SELECT count(*) AS n, sum(amount) AS total FROM moves",
        source_options(&broker, "moves", ", format = 'json'")
    ))
    .await
    .unwrap();
    let expected_totals = [row(&["30", "85"])];
    wait_rows(
        &weir,
        "SELECT n, total FROM totals",
        &expected_totals,
        Duration::from_secs(30),
    )
    .await;
    // The position is the next offset plus one: after the last marker,
    // not after the last record (32).
    let position = "SELECT CAST(position AS TEXT) FROM weir_source_readers WHERE view = 'totals'";
    let after_the_marker = [row(&[&(high + 1).to_string()])];
    wait_rows(&weir, position, &after_the_marker, Duration::from_secs(30)).await;

    // A view created now reads the records on its own up to the shared
    // readers' positions and then shares them (a reader per worker).
    weir.batch_execute("CREATE MATERIALIZED VIEW ids AS SELECT id FROM moves")
        .await
        .unwrap();
    wait_rows(
        &weir,
        "SELECT CAST(count(*) AS TEXT), CAST(count(DISTINCT id) AS TEXT) FROM ids",
        &[row(&["30", "30"])],
        Duration::from_secs(30),
    )
    .await;
    wait_rows(
        &weir,
        "SELECT DISTINCT CAST(views AS TEXT) FROM weir_shared_readers WHERE source = 'moves'",
        &[row(&["2"])],
        Duration::from_secs(30),
    )
    .await;

    // Another transaction: both views read it once, and stand past its
    // marker.
    broker.send_in_transactions("moves", &[batch(30)]).await;
    let high = broker.high_watermark("moves", 0);
    assert_eq!(high, 44);
    wait_rows(
        &weir,
        "SELECT n, total FROM totals",
        &[row(&["40", "115"])],
        Duration::from_secs(30),
    )
    .await;
    wait_rows(
        &weir,
        "SELECT CAST(count(*) AS TEXT) FROM ids",
        &[row(&["40"])],
        Duration::from_secs(30),
    )
    .await;
    let both = "SELECT view, CAST(position AS TEXT) FROM weir_source_readers \
                WHERE source = 'moves'";
    let at = (high + 1).to_string();
    wait_rows(
        &weir,
        both,
        &[row(&["ids", &at]), row(&["totals", &at])],
        Duration::from_secs(30),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_sinks_deliver_each_committed_epoch_once_through_sigkill_cycles() {
    let broker = Broker::start().await;
    for topic in ["balances", "holds", "deposits", "deposits_again"] {
        broker.create_topic(topic, 2).await;
    }
    let mut server = TestServer::start().await;
    let weir = server.client().await;
    let target = |topic: &str, extra: &str| {
        format!(
            "connector = 'kafka', topic = '{topic}', properties.bootstrap.server = '{}'{extra}",
            broker.address()
        )
    };
    weir.batch_execute(&format!(
        "CREATE TABLE deposits (id int, account int, amount int) APPEND ONLY; \
         CREATE TABLE holds (account int PRIMARY KEY, amount int); \
         CREATE MATERIALIZED VIEW balances AS \
             SELECT account, count(*) AS n, sum(amount) AS total FROM deposits GROUP BY account; \
         CREATE SINK balances_out FROM balances WITH ({}); \
         CREATE SINK holds_out FROM holds WITH ({}); \
         CREATE SINK deposits_out AS SELECT id, account, amount FROM deposits WITH ({}); \
         CREATE SINK deposits_again FROM deposits WITH ({})",
        target("balances", ", type = 'upsert', primary_key = 'account'"),
        target("holds", ", type = 'upsert', primary_key = 'account'"),
        target("deposits", ", type = 'append-only'"),
        target(
            "deposits_again",
            ", type = 'append-only', delivery = 'at_least_once'"
        ),
    ))
    .await
    .unwrap();

    // An append-only sink of an updating query, and a topic that does
    // not exist, are refused.
    assert_eq!(
        sqlstate(
            &weir,
            &format!(
                "CREATE SINK bad FROM balances WITH ({})",
                target("balances", ", type = 'append-only'")
            )
        )
        .await,
        "22023"
    );
    assert_eq!(
        sqlstate(
            &weir,
            &format!(
                "CREATE SINK bad FROM deposits WITH ({})",
                target("nowhere", ", type = 'append-only'")
            )
        )
        .await,
        "42704"
    );

    // Deposits are inserted and holds placed and lifted (which their
    // sink sends as values and tombstones) while the server is killed.
    let mut rng = rand::rngs::StdRng::seed_from_u64(5);
    let (mut inserted, mut hold_changes) = (0u64, 0u64);
    let mut delivered = 0;
    for cycle in 0..8 {
        let weir = server.client().await;
        let writes = rng.random_range(6..16);
        for write in 0..writes {
            if write == writes / 2 {
                // The sink delivers in this process before the kill, so
                // that the kill can land inside one of its transactions.
                let started = Instant::now();
                while crate::sinks::sink_status(&weir, "deposits_out").await.0 <= delivered {
                    assert!(
                        started.elapsed() < Duration::from_secs(60),
                        "deposits_out delivered nothing after epoch {delivered}"
                    );
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                delivered = crate::sinks::sink_status(&weir, "deposits_out").await.0;
            }
            let (account, amount) = (rng.random_range(0..6), rng.random_range(1..100));
            weir.batch_execute(&format!(
                "INSERT INTO deposits VALUES ({inserted}, {account}, {amount})"
            ))
            .await
            .unwrap();
            inserted += 1;
            let hold = if rng.random_bool(0.3) {
                format!("DELETE FROM holds WHERE account = {account}")
            } else {
                format!(
                    "INSERT INTO holds VALUES ({account}, {amount}) \
                         ON CONFLICT (account) DO UPDATE SET amount = excluded.amount"
                )
            };
            hold_changes += weir.execute(hold.as_str(), &[]).await.unwrap();
            tokio::time::sleep(Duration::from_millis(rng.random_range(0..40))).await;
        }
        if cycle < 7 {
            server.restart_after_kill().await;
        }
    }
    assert!(inserted >= 40, "only {inserted} deposits were inserted");
    assert!(hold_changes >= 20, "only {hold_changes} holds changed");

    let weir = server.client().await;
    for sink in [
        "balances_out",
        "holds_out",
        "deposits_out",
        "deposits_again",
    ] {
        wait_status(&weir, sink, |s| s.1 == 0 && s.0 > 0).await;
    }
    // The upsert topics fold to the relations' rows.
    let balances: BTreeMap<String, String> =
        sorted_rows(&weir, "SELECT account, n, total FROM balances")
            .await
            .into_iter()
            .map(|r| {
                let [a, n, t] = [0, 1, 2].map(|i| r[i].clone().unwrap());
                (
                    format!("{{\"account\":{a}}}"),
                    format!("{{\"account\":{a},\"n\":{n},\"total\":{t}}}"),
                )
            })
            .collect();
    assert_eq!(upserted(&broker.read_committed("balances")), balances);
    let holds: BTreeMap<String, String> = sorted_rows(&weir, "SELECT account, amount FROM holds")
        .await
        .into_iter()
        .map(|r| {
            let [a, m] = [0, 1].map(|i| r[i].clone().unwrap());
            (
                format!("{{\"account\":{a}}}"),
                format!("{{\"account\":{a},\"amount\":{m}}}"),
            )
        })
        .collect();
    let hold_records = broker.read_committed("holds");
    assert!(
        hold_records.iter().any(|(_, value)| value.is_none()),
        "no tombstone among {hold_records:?}"
    );
    assert_eq!(upserted(&hold_records), holds);

    // Exactly once, as Apache Kafka's read_committed consumers would see
    // the topics: the records of committed transactions, with the markers
    // applied here (`kafka_wire`), since nisshi 0.7 hands aborted
    // transactions' records to read_committed consumers too.
    let deposits = broker.outcomes("deposits");
    let progress = broker.outcomes("weir_sink_progress");
    let value = |record: &Record| -> serde_json::Value {
        serde_json::from_str(record.value.as_deref().unwrap()).unwrap()
    };
    // Each sink commits each epoch's progress once, in order.
    let mut last: BTreeMap<String, u64> = BTreeMap::new();
    for record in &progress.committed {
        let epoch = value(record)["epoch"].as_u64().unwrap();
        let key = record.key.clone().unwrap();
        if let Some(before) = last.insert(key.clone(), epoch) {
            assert!(
                epoch > before,
                "{key}: epoch {epoch} committed after {before}"
            );
        }
    }
    assert_eq!(
        last.keys().cloned().collect::<Vec<_>>(),
        ["weir-balances_out", "weir-deposits_out", "weir-holds_out"]
    );
    // No deposit is committed twice.
    let id = |record: &Record| value(record)["id"].as_u64().unwrap();
    let committed: BTreeSet<u64> = deposits.committed.iter().map(id).collect();
    assert_eq!(
        committed.len(),
        deposits.committed.len(),
        "a deposit was committed twice"
    );
    // Every deposit is committed, unless its epoch's transaction was cut
    // short by a SIGKILL after its progress record: nisshi then shows that
    // aborted progress record to the restarted sink's read_committed
    // consumer, which takes the epoch as delivered (Apache Kafka hides it,
    // and the sink writes the epoch again).
    let progress_shown: BTreeSet<Session> = progress
        .aborted
        .iter()
        .chain(&progress.open)
        .filter(|r| r.key.as_deref() == Some("weir-deposits_out"))
        .map(|r| r.session)
        .collect();
    let mut shown_as_delivered = 0;
    for missing in (0..inserted).filter(|i| !committed.contains(i)) {
        assert!(
            deposits
                .aborted
                .iter()
                .chain(&deposits.open)
                .any(|r| id(r) == missing && progress_shown.contains(&r.session)),
            "deposit {missing} was lost"
        );
        shown_as_delivered += 1;
    }
    eprintln!(
        "deposits: {} committed, {} in aborted transactions ({} in open ones), \
         {shown_as_delivered} only in an aborted transaction with its progress record",
        deposits.committed.len(),
        deposits.aborted.len(),
        deposits.open.len(),
    );

    weir.batch_execute(&format!(
        "CREATE SOURCE again (id bigint) WITH ({}); \
         CREATE MATERIALIZED VIEW again_ids AS \
             SELECT count(DISTINCT id) AS ids, min(id) AS low, max(id) AS high FROM again",
        source_options(&broker, "deposits_again", ", format = 'json'")
    ))
    .await
    .unwrap();
    wait_rows(
        &weir,
        "SELECT ids, low, high FROM again_ids",
        &[row(&[
            &inserted.to_string(),
            "0",
            &(inserted - 1).to_string(),
        ])],
        Duration::from_secs(30),
    )
    .await;

    // Without crashes, each epoch's records arrive once.
    for more in inserted..inserted + 30 {
        weir.batch_execute(&format!("INSERT INTO deposits VALUES ({more}, 1, 1)"))
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    wait_until_delivered(&weir, "deposits_out", inserted + 30).await;
    let now = broker.outcomes("deposits");
    assert_eq!(now.committed.len(), deposits.committed.len() + 30);
    let mut fresh: Vec<u64> = now
        .committed
        .iter()
        .map(id)
        .filter(|&i| i >= inserted)
        .collect();
    fresh.sort_unstable();
    assert_eq!(fresh, (inserted..inserted + 30).collect::<Vec<_>>());
}

/// Waits until sink `name` has delivered an epoch that holds deposit
/// `count - 1` (its epochs wait in the checkpoint until it has).
async fn wait_until_delivered(weir: &Client, name: &str, count: u64) {
    let started = Instant::now();
    loop {
        let rows = sorted_rows(weir, "SELECT count(*) FROM deposits").await;
        let status = crate::sinks::sink_status(weir, name).await;
        if rows[0][0].as_deref() == Some(&count.to_string()) && status.1 == 0 {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{name}: {status:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sources_and_sinks_ride_out_a_broker_restart() {
    // The broker keeps its log in the tests' S3 server, so that a
    // restart loses nothing.
    let mut broker = Broker::start_durable("weir_kafka_restart").await;
    broker.create_topic("readings", 2).await;
    broker.create_topic("copies", 2).await;
    let server = TestServer::start().await;
    let weir = server.client().await;
    weir.batch_execute(&format!(
        "CREATE SOURCE readings (id bigint, device int) WITH ({}); \
         CREATE MATERIALIZED VIEW per_device AS \
             SELECT device, count(*) AS n, count(DISTINCT id) AS ids FROM readings GROUP BY device; \
         CREATE TABLE notes (id int, body text) APPEND ONLY; \
         CREATE SINK notes_out FROM notes WITH (connector = 'kafka', topic = 'copies', \
             properties.bootstrap.server = '{}', type = 'append-only', \
             delivery = 'at_least_once')",
        source_options(&broker, "readings", ", format = 'json'"),
        broker.address()
    ))
    .await
    .unwrap();
    let producer = broker.producer();
    let mut produced = 0u64;
    let mut noted = 0u64;
    for round in 0..3 {
        for _ in 0..50 {
            let value = format!(r#"{{"id": {produced}, "device": {}}}"#, produced % 4);
            Broker::send(&producer, "readings", (produced % 2) as i32, None, &value).await;
            produced += 1;
        }
        for _ in 0..10 {
            weir.batch_execute(&format!("INSERT INTO notes VALUES ({noted}, 'n{noted}')"))
                .await
                .unwrap();
            noted += 1;
        }
        if round == 1 {
            // While the broker is down, Weir keeps serving reads and
            // taking writes; the sink's epochs wait in the checkpoint.
            broker.stop();
            let held = sorted_rows(&weir, "SELECT sum(n) FROM per_device").await;
            assert!(held[0][0].is_some(), "{held:?}");
            for _ in 0..10 {
                weir.batch_execute(&format!("INSERT INTO notes VALUES ({noted}, 'n{noted}')"))
                    .await
                    .unwrap();
                noted += 1;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
            broker.restart();
        }
    }
    assert!(produced == 150 && noted == 40);
    wait_rows(
        &weir,
        "SELECT device, n, ids FROM per_device",
        &(0..4)
            .map(|d| {
                let each = (0..produced).filter(|i| i % 4 == d).count().to_string();
                row(&[&d.to_string(), &each, &each])
            })
            .collect::<Vec<_>>(),
        Duration::from_secs(60),
    )
    .await;
    wait_status(&weir, "notes_out", |s| s.1 == 0).await;
    // The sink's topic, read back through a Kafka source: every note at
    // least once.
    weir.batch_execute(&format!(
        "CREATE SOURCE copies (id bigint, body text) WITH ({}); \
         CREATE MATERIALIZED VIEW copied AS SELECT count(DISTINCT id) AS ids, min(id) AS low, \
             max(id) AS high FROM copies",
        source_options(&broker, "copies", ", format = 'json'")
    ))
    .await
    .unwrap();
    wait_rows(
        &weir,
        "SELECT ids, low, high FROM copied",
        &[row(&[&noted.to_string(), "0", &(noted - 1).to_string()])],
        Duration::from_secs(60),
    )
    .await;
}
