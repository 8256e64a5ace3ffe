//! A Kafka-protocol broker for the Kafka tests: nisshi (formerly tansu, a
//! Kafka-compatible broker written in Rust, with transactions; `.ci/run`
//! installs it and sets `WEIR_TEST_BROKER` to its binary, else `nisshi`
//! on the PATH), started here on a free loopback port and stopped by its
//! process id. Without it, the tests that
//! need it fail. Its storage is in memory, or for a broker that is
//! restarted, in the tests' S3-compatible server (`WEIR_TEST_S3_ENDPOINT`,
//! bucket `weir`, or a moto started here) under a cluster id of its own,
//! so that it keeps its topics and transactions.

use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{FutureProducer, FutureRecord, Producer};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};

use crate::common::free_port;
use crate::s3::{server_env, test_endpoint, Moto};

/// A running nisshi broker.
pub struct Broker {
    child: Option<Child>,
    port: u16,
    storage: String,
    /// `--cluster-id`, and for S3 storage the endpoint's settings.
    cluster: String,
    env: Vec<(&'static str, String)>,
    /// The S3 server, when this test started one for the storage.
    _moto: Option<Moto>,
}

impl Drop for Broker {
    fn drop(&mut self) {
        self.stop();
    }
}

impl Broker {
    /// A broker with its storage in memory.
    pub async fn start() -> Broker {
        Self::start_on("memory://nisshi/", "weir_tests", Vec::new(), None)
    }

    /// A broker whose storage survives its restarts: the tests' S3
    /// server, under cluster id `name` and a fresh suffix.
    pub async fn start_durable(name: &str) -> Broker {
        let (endpoint, moto) = test_endpoint();
        let env = server_env(&endpoint)
            .into_iter()
            .map(|(key, value)| (key, value.to_owned()))
            .collect();
        let cluster = format!("{name}_{}", std::process::id());
        Self::start_on("s3://weir/", &cluster, env, moto)
    }

    fn start_on(
        storage: &str,
        cluster: &str,
        env: Vec<(&'static str, String)>,
        moto: Option<Moto>,
    ) -> Broker {
        let mut broker = Broker {
            child: None,
            port: free_port(),
            storage: storage.to_owned(),
            cluster: cluster.to_owned(),
            env,
            _moto: moto,
        };
        broker.run();
        broker
    }

    fn run(&mut self) {
        let binary = std::env::var("WEIR_TEST_BROKER").unwrap_or_else(|_| "nisshi".to_owned());
        let url = format!("tcp://127.0.0.1:{}", self.port);
        let child = Command::new(&binary)
            .args([
                "broker",
                "--listener-url",
                &url,
                "--advertised-listener-url",
                &url,
            ])
            .args([
                "--storage-engine",
                &self.storage,
                "--cluster-id",
                &self.cluster,
            ])
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .unwrap_or_else(|e| {
                panic!(
                    "the Kafka tests need a Kafka-protocol broker: install nisshi \
                     (see the README) or set WEIR_TEST_BROKER to its binary ({binary}: {e})"
                )
            });
        self.child = Some(child);
        let started = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_err() {
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "the broker did not listen on port {}",
                self.port
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Stops the broker (SIGKILL), by its process id.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the stopped broker again on the same port and storage.
    pub fn restart(&mut self) {
        self.stop();
        self.run();
    }

    /// `bootstrap.servers` for it.
    pub fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    fn config(&self) -> ClientConfig {
        let mut config = ClientConfig::new();
        config.set("bootstrap.servers", self.address());
        config
    }

    /// Creates `topic` with `partitions` partitions.
    pub async fn create_topic(&self, topic: &str, partitions: i32) {
        let admin: AdminClient<DefaultClientContext> = self.config().create().unwrap();
        let results = admin
            .create_topics(
                [&NewTopic::new(
                    topic,
                    partitions,
                    TopicReplication::Fixed(1),
                )],
                &AdminOptions::new(),
            )
            .await
            .unwrap();
        for result in results {
            result.unwrap_or_else(|e| panic!("creating topic {topic}: {e:?}"));
        }
    }

    /// A producer that waits for each record to be acknowledged.
    pub fn producer(&self) -> FutureProducer {
        self.config()
            .set("enable.idempotence", "true")
            .set("linger.ms", "1")
            .create()
            .unwrap()
    }

    /// Writes `value` (with `key`) to `partition` of `topic`.
    pub async fn send<V: rdkafka::message::ToBytes + ?Sized>(
        producer: &FutureProducer,
        topic: &str,
        partition: i32,
        key: Option<&str>,
        value: &V,
    ) {
        let mut record = FutureRecord::to(topic).partition(partition).payload(value);
        if let Some(key) = key {
            record = record.key(key);
        }
        producer
            .send(record, Duration::from_secs(30))
            .await
            .unwrap_or_else(|(e, _)| panic!("producing to {topic}: {e}"));
    }

    /// Writes each of `transactions` to partition 0 of `topic` in a
    /// Kafka transaction of its own, which ends with a commit marker: an
    /// offset that holds no record.
    pub async fn send_in_transactions(&self, topic: &str, transactions: &[Vec<String>]) {
        let producer: FutureProducer = self
            .config()
            .set("transactional.id", format!("weir-tests-{topic}"))
            .set("linger.ms", "1")
            .create()
            .unwrap();
        let timeout = Duration::from_secs(30);
        producer.init_transactions(timeout).unwrap();
        for records in transactions {
            producer.begin_transaction().unwrap();
            for record in records {
                Self::send(&producer, topic, 0, None, record.as_str()).await;
            }
            producer.commit_transaction(timeout).unwrap();
        }
    }

    /// The high watermark of `partition` of `topic`: the offset after its
    /// last record or marker.
    pub fn high_watermark(&self, topic: &str, partition: i32) -> i64 {
        let consumer: BaseConsumer = self.config().create().unwrap();
        consumer
            .fetch_watermarks(topic, partition, Duration::from_secs(30))
            .unwrap()
            .1
    }

    /// Every record of `topic` by how its transaction ended, read over
    /// the protocol with the markers applied here (see `kafka_wire`).
    pub fn outcomes(&self, topic: &str) -> crate::kafka_wire::Outcomes {
        let consumer: BaseConsumer = self.config().create().unwrap();
        let metadata = consumer
            .fetch_metadata(Some(topic), Duration::from_secs(30))
            .unwrap();
        let partitions = metadata.topics()[0].partitions().len() as i32;
        crate::kafka_wire::outcomes(&self.address(), topic, partitions)
    }

    /// Every committed record of `topic`, a topic the caller knows holds
    /// records, as (key, value), partition by partition in offset order.
    /// On a loaded machine the broker may answer every partition as empty
    /// for a while (seen once in CI: both partitions of a topic holding
    /// six keys' records read as empty), so an empty read is tried again
    /// for 30 s before it is returned.
    pub fn read_committed(&self, topic: &str) -> Vec<(Option<String>, Option<String>)> {
        let asked = Instant::now();
        loop {
            let records = self.read_committed_once(topic);
            if !records.is_empty() || asked.elapsed() > Duration::from_secs(30) {
                return records;
            }
            std::thread::sleep(Duration::from_secs(1));
        }
    }

    /// One read of [`Broker::read_committed`].
    fn read_committed_once(&self, topic: &str) -> Vec<(Option<String>, Option<String>)> {
        let consumer: BaseConsumer = self
            .config()
            .set("group.id", "weir-tests")
            .set("enable.auto.commit", "false")
            .set("isolation.level", "read_committed")
            .create()
            .unwrap();
        // Each partition's end: its high watermark, from a client that
        // does not ask for the last stable offset.
        let ends_of: BaseConsumer = self.config().create().unwrap();
        let metadata = consumer
            .fetch_metadata(Some(topic), Duration::from_secs(30))
            .unwrap();
        let partitions = metadata.topics()[0].partitions().len() as i32;
        let mut records = Vec::new();
        for partition in 0..partitions {
            // A partition's end as the broker reports it; on a loaded
            // machine a partition written to may still read as empty for
            // a moment (asked again for 2 s), and its offsets as unknown
            // (-1: asked again for 15 s).
            let asked = Instant::now();
            let high = loop {
                let high = ends_of
                    .fetch_watermarks(topic, partition, Duration::from_secs(30))
                    .unwrap()
                    .1;
                let waited = asked.elapsed();
                if high > 0
                    || (high == 0 && waited > Duration::from_secs(2))
                    || waited > Duration::from_secs(15)
                {
                    break high;
                }
                std::thread::sleep(Duration::from_millis(200));
            };
            if high <= 0 {
                continue;
            }
            let mut assignment = TopicPartitionList::new();
            assignment
                .add_partition_offset(topic, partition, Offset::Beginning)
                .unwrap();
            consumer.assign(&assignment).unwrap();
            // The partition's last offsets may be transaction markers,
            // which no poll returns: done at the end, or once nothing
            // more comes (the tests read a topic nothing writes to).
            // The first fetch may take long on a loaded machine: wait
            // longer for a partition's first record than between records.
            let mut idle = Duration::ZERO;
            let mut patience = Duration::from_secs(15);
            while idle < patience {
                let position = consumer
                    .position()
                    .unwrap()
                    .find_partition(topic, partition)
                    .map(|p| p.offset());
                if matches!(position, Some(Offset::Offset(at)) if at >= high) {
                    break;
                }
                match consumer.poll(Duration::from_millis(200)) {
                    Some(message) => {
                        let message = message.unwrap();
                        let text =
                            |b: Option<&[u8]>| b.map(|b| String::from_utf8_lossy(b).into_owned());
                        records.push((text(message.key()), text(message.payload())));
                        idle = Duration::ZERO;
                        patience = Duration::from_secs(2);
                        if message.offset() + 1 >= high {
                            break;
                        }
                    }
                    None => idle += Duration::from_millis(200),
                }
            }
        }
        records
    }
}
