//! `weir-bench kafka`: a Kafka-compatible broker (nisshi, started here on
//! loopback with in-memory storage) and Weir. Measures a Kafka source into
//! a group-by view (records produced beforehand, then read from the
//! earliest offset until the view counts them all), and a view's rows
//! into a Kafka sink, exactly-once (one transaction per epoch) and
//! at-least-once, until the sink has delivered every epoch. Reports
//! records per second and per CPU-second of the Weir server (the broker's
//! own CPU is printed beside it, not counted), and Weir's peak memory.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::producer::{BaseRecord, DefaultProducerContext, Producer, ThreadedProducer};
use rdkafka::ClientConfig;

use crate::server::{wait_delivered, wait_for, Server};

/// What to run.
pub struct KafkaLoad {
    /// The broker binary.
    pub broker: String,
    /// Records produced for the source, and rows for each sink.
    pub records: u64,
    /// The topics' partitions.
    pub partitions: i32,
}

/// A broker process, killed on drop.
struct Broker {
    child: Child,
    address: String,
}

impl Drop for Broker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Broker {
    fn start(binary: &str) -> anyhow::Result<Broker> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let url = format!("tcp://127.0.0.1:{port}");
        let child = Command::new(binary)
            .args([
                "broker",
                "--listener-url",
                &url,
                "--advertised-listener-url",
                &url,
            ])
            .args(["--storage-engine", "memory://nisshi/"])
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .with_context(|| format!("starting the broker {binary}"))?;
        let deadline = Instant::now() + Duration::from_secs(30);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            anyhow::ensure!(Instant::now() < deadline, "the broker did not listen");
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(Broker {
            child,
            address: format!("127.0.0.1:{port}"),
        })
    }

    fn config(&self) -> ClientConfig {
        let mut config = ClientConfig::new();
        config.set("bootstrap.servers", &self.address);
        config
    }

    async fn create_topic(&self, topic: &str, partitions: i32) -> anyhow::Result<()> {
        let admin: AdminClient<DefaultClientContext> = self.config().create()?;
        for result in admin
            .create_topics(
                [&NewTopic::new(
                    topic,
                    partitions,
                    TopicReplication::Fixed(1),
                )],
                &AdminOptions::new(),
            )
            .await?
        {
            result.map_err(|(name, code)| anyhow::anyhow!("creating {name}: {code}"))?;
        }
        Ok(())
    }

    fn cpu_time(&self) -> anyhow::Result<Duration> {
        crate::server::process_cpu_time(self.child.id())
    }
}

/// Runs the source and sink measurements and prints their figures.
pub async fn run(load: KafkaLoad) -> anyhow::Result<()> {
    let broker = Broker::start(&load.broker)?;
    broker.create_topic("bids", load.partitions).await?;

    // The records, produced before Weir reads them: bids of 10,000
    // auctions, about 100 bytes of JSON each.
    let started = Instant::now();
    let producer: ThreadedProducer<DefaultProducerContext> = broker
        .config()
        .set("linger.ms", "20")
        .set("batch.size", "1000000")
        .set("queue.buffering.max.messages", "1000000")
        .create()?;
    for i in 0..load.records {
        let value = format!(
            r#"{{"auction": {}, "bidder": {}, "price": {}, "channel": "channel-{}", "date_time": "2026-12-03 10:00:00"}}"#,
            i * 7919 % 10_000,
            i % 100_003,
            i * 31 % 1_000_000,
            i % 8
        );
        let mut record = BaseRecord::<(), str>::to("bids").payload(&value);
        loop {
            match producer.send(record) {
                Ok(()) => break,
                Err((_, back)) => {
                    record = back;
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
        }
    }
    producer.flush(Duration::from_secs(300))?;
    println!(
        "kafka: broker nisshi on loopback (in-memory storage), {} partitions; {} records produced in {:.1} s",
        load.partitions,
        load.records,
        started.elapsed().as_secs_f64()
    );

    let server = Server::start().await?;
    let weir = server.client().await?;
    let (cpu_before, broker_before) = (server.cpu_time()?, broker.cpu_time()?);
    let started = Instant::now();
    weir.batch_execute(&format!(
        "CREATE SOURCE bids (auction bigint, bidder bigint, price bigint, channel text, \
             date_time timestamp) \
             WITH (connector = 'kafka', topic = 'bids', properties.bootstrap.server = '{}', \
                   format = 'json');
         CREATE MATERIALIZED VIEW per_auction AS \
             SELECT auction, count(*) AS n, sum(price) AS total FROM bids GROUP BY auction",
        broker.address
    ))
    .await?;
    wait_for(
        &weir,
        &format!("SELECT sum(n) = {} FROM per_auction", load.records),
    )
    .await?;
    report(
        "source -> group-by view",
        load.records,
        started,
        server.cpu_time()? - cpu_before,
        broker.cpu_time()? - broker_before,
    );
    weir.batch_execute("DROP MATERIALIZED VIEW per_auction")
        .await?;

    // Sinks: a generated stream's rows, each to a topic of its own.
    for (name, delivery) in [
        ("exactly_once", "exactly_once"),
        ("at_least_once", "at_least_once"),
    ] {
        broker.create_topic(name, load.partitions).await?;
        let (cpu_before, broker_before) = (server.cpu_time()?, broker.cpu_time()?);
        let started = Instant::now();
        weir.batch_execute(&format!(
            "CREATE SOURCE gen_{name} (id bigint, auction bigint, price bigint, channel text) \
                 WITH (connector = 'datagen', rows_per_second = '100000000', \
                       total_rows = '{rows}', fields.id.kind = 'sequence', \
                       fields.auction.min = '1', fields.auction.max = '10000', \
                       fields.channel.length = '8');
             CREATE SINK to_{name} FROM gen_{name} \
                 WITH (connector = 'kafka', topic = '{name}', \
                       properties.bootstrap.server = '{broker}', type = 'append-only', \
                       delivery = '{delivery}')",
            rows = load.records,
            broker = broker.address,
        ))
        .await?;
        wait_delivered(&weir, &format!("to_{name}"), load.records).await?;
        report(
            &format!("datagen -> Kafka sink, {name}"),
            load.records,
            started,
            server.cpu_time()? - cpu_before,
            broker.cpu_time()? - broker_before,
        );
    }
    println!(
        "  Weir peak memory {:.0} MiB",
        server.peak_rss_kib()? as f64 / 1024.0
    );
    Ok(())
}

fn report(what: &str, records: u64, started: Instant, cpu: Duration, broker_cpu: Duration) {
    let seconds = started.elapsed().as_secs_f64();
    println!(
        "  {what:<34} {records:>9} records  {:>9.0} /s  {:>9.0} /CPU-s  ({seconds:.1} s, Weir {:.1} CPU-s, broker {:.1} CPU-s)",
        records as f64 / seconds,
        records as f64 / cpu.as_secs_f64(),
        cpu.as_secs_f64(),
        broker_cpu.as_secs_f64(),
    );
}
