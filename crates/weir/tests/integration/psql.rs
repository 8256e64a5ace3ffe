//! psql itself: meta-commands and `\copy`.

use std::process::Command;

use crate::common::{column, TestServer};

fn psql(server: &TestServer, args: &[&str]) -> (bool, String, String) {
    let output = Command::new("psql")
        .args(["-X", "-h", "127.0.0.1", "-U", "weir", "-d", "weir", "-p"])
        .arg(server.addr.port().to_string())
        .args(args)
        .output()
        .expect("psql must be installed (postgresql-client)");
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[tokio::test]
async fn meta_commands_describe_the_catalog() {
    let server = TestServer::start().await;
    let client = server.client().await;
    client
        .batch_execute(
            "CREATE TABLE orders (id BIGINT PRIMARY KEY, customer TEXT NOT NULL, total NUMERIC(10,2), placed TIMESTAMP);
             CREATE VIEW big_orders AS SELECT id, total FROM orders WHERE total > 100",
        )
        .await
        .unwrap();
    let (ok, out, err) = psql(&server, &["-c", "\\dt"]);
    assert!(ok, "{err}");
    assert!(out.contains("orders") && out.contains("table"), "{out}");
    assert!(!out.contains("big_orders"), "\\dt lists only tables: {out}");

    let (ok, out, err) = psql(&server, &["-c", "\\d"]);
    assert!(ok, "{err}");
    assert!(
        out.contains("orders") && out.contains("big_orders") && out.contains("view"),
        "{out}"
    );

    let (ok, out, err) = psql(&server, &["-c", "\\d orders"]);
    assert!(ok, "{err}");
    assert!(out.contains("Table \"public.orders\""), "{out}");
    for expected in [
        "id",
        "bigint",
        "customer",
        "text",
        "not null",
        "numeric",
        "timestamp without time zone",
    ] {
        assert!(out.contains(expected), "missing {expected:?} in {out}");
    }

    client
        .batch_execute(
            "CREATE MATERIALIZED VIEW spend AS SELECT customer, sum(total) AS spent FROM orders GROUP BY customer",
        )
        .await
        .unwrap();
    let (ok, out, err) = psql(&server, &["-c", "\\dm"]);
    assert!(ok, "{err}");
    assert!(
        out.contains("spend") && out.contains("materialized view") && !out.contains("big_orders"),
        "{out}"
    );
    let (ok, out, err) = psql(&server, &["-c", "\\d spend"]);
    assert!(ok, "{err}");
    assert!(
        out.contains("Materialized view \"public.spend\"") && out.contains("spent"),
        "{out}"
    );

    let (ok, out, err) = psql(&server, &["-c", "\\dv"]);
    assert!(ok, "{err}");
    assert!(
        out.contains("big_orders") && out.contains("view") && !out.contains("spend"),
        "\\dv lists only views: {out}"
    );

    // No user functions: an empty list, as PostgreSQL's, not an error.
    let (ok, out, err) = psql(&server, &["-c", "\\df"]);
    assert!(ok, "{err}");
    assert!(out.contains("List of functions"), "{out}");
    assert!(out.contains("(0 rows)"), "{out}");

    let (ok, out, err) = psql(&server, &["-c", "\\l"]);
    assert!(ok, "{err}");
    assert!(out.contains("weir"), "{out}");

    let (ok, out, err) = psql(&server, &["-c", "\\dn"]);
    assert!(ok, "{err}");
    assert!(out.contains("public"), "{out}");

    let (ok, out, err) = psql(&server, &["-At", "-c", "SELECT version()"]);
    assert!(ok, "{err}");
    assert!(out.starts_with("PostgreSQL 16"), "{out}");
}

/// psql's output with each line's trailing blanks removed.
fn described(server: &TestServer, command: &str) -> String {
    let (ok, out, err) = psql(server, &["-c", command]);
    assert!(ok, "{command}: {err}");
    out.lines()
        .map(str::trim_end)
        .collect::<Vec<_>>()
        .join("\n")
}

/// `\d`, `\d+` and `\di` print what PostgreSQL 15's psql prints for the same
/// objects (captured from PostgreSQL): primary keys, their indexes, column
/// defaults and declared types, and views' columns without NOT NULL.
#[tokio::test]
async fn meta_commands_show_keys_defaults_and_declared_types() {
    let server = TestServer::start().await;
    let client = server.client().await;
    client
        .batch_execute(
            "CREATE TABLE orders (id INT PRIMARY KEY, customer TEXT NOT NULL, amount NUMERIC(10,2), note VARCHAR(20) DEFAULT 'none', at TIMESTAMPTZ);
             CREATE TABLE pairs (a INT, b TEXT, v INT, PRIMARY KEY (a, b));
             CREATE MATERIALIZED VIEW totals AS SELECT customer, sum(amount) AS total FROM orders GROUP BY customer",
        )
        .await
        .unwrap();
    let expected_orders = r#"                                 Table "public.orders"
  Column  |           Type           | Collation | Nullable |          Default
----------+--------------------------+-----------+----------+---------------------------
 id       | integer                  |           | not null |
 customer | text                     |           | not null |
 amount   | numeric(10,2)            |           |          |
 note     | character varying(20)    |           |          | 'none'::character varying
 at       | timestamp with time zone |           |          |
Indexes:
    "orders_pkey" PRIMARY KEY, btree (id)
"#;
    assert_eq!(described(&server, "\\d orders"), expected_orders);
    let expected_pairs = r#"               Table "public.pairs"
 Column |  Type   | Collation | Nullable | Default
--------+---------+-----------+----------+---------
 a      | integer |           | not null |
 b      | text    |           | not null |
 v      | integer |           |          |
Indexes:
    "pairs_pkey" PRIMARY KEY, btree (a, b)
"#;
    assert_eq!(described(&server, "\\d pairs"), expected_pairs);
    let expected_key = r#"      Index "public.pairs_pkey"
 Column |  Type   | Key? | Definition
--------+---------+------+------------
 a      | integer | yes  | a
 b      | text    | yes  | b
primary key, btree, for table "public.pairs"
"#;
    assert_eq!(described(&server, "\\d pairs_pkey"), expected_key);
    let expected_indexes = r#"                List of relations
 Schema |    Name     | Type  |  Owner   | Table
--------+-------------+-------+----------+--------
 public | orders_pkey | index | postgres | orders
 public | pairs_pkey  | index | postgres | pairs
(2 rows)
"#;
    assert_eq!(described(&server, "\\di"), expected_indexes);
    let expected_plus = r#"                                                            Table "public.orders"
  Column  |           Type           | Collation | Nullable |          Default          | Storage  | Compression | Stats target | Description
----------+--------------------------+-----------+----------+---------------------------+----------+-------------+--------------+-------------
 id       | integer                  |           | not null |                           | plain    |             |              |
 customer | text                     |           | not null |                           | extended |             |              |
 amount   | numeric(10,2)            |           |          |                           | main     |             |              |
 note     | character varying(20)    |           |          | 'none'::character varying | extended |             |              |
 at       | timestamp with time zone |           |          |                           | plain    |             |              |
Indexes:
    "orders_pkey" PRIMARY KEY, btree (id)
Access method: heap
"#;
    assert_eq!(described(&server, "\\d+ orders"), expected_plus);
    let expected_view = r#"          Materialized view "public.totals"
  Column  |  Type   | Collation | Nullable | Default
----------+---------+-----------+----------+---------
 customer | text    |           |          |
 total    | numeric |           |          |
"#;
    assert_eq!(described(&server, "\\d totals"), expected_view);
    let (ok, out, err) = psql(&server, &["-c", "\\d+ totals"]);
    assert!(ok, "{err}");
    assert!(
        out.contains("View definition:") && out.contains("GROUP BY customer"),
        "{out}"
    );
    // Indexes made with CREATE INDEX, on a table and on a view, are
    // listed too, and under their table's \d.
    client
        .batch_execute(
            "CREATE INDEX orders_customer ON orders (customer); \
             CREATE INDEX totals_total ON totals (total)",
        )
        .await
        .unwrap();
    let listed = described(&server, "\\di");
    for (index, on) in [("orders_customer", "orders"), ("totals_total", "totals")] {
        assert!(
            listed
                .lines()
                .any(|l| l.contains(&format!(" {index} ")) && l.trim_end().ends_with(on)),
            "{listed}"
        );
    }
    let described_orders = described(&server, "\\d orders");
    assert!(
        described_orders.contains("\"orders_customer\" btree (customer)"),
        "{described_orders}"
    );
    // A dropped key's objects go with its table.
    client.batch_execute("DROP TABLE pairs").await.unwrap();
    assert!(!described(&server, "\\di").contains("pairs_pkey"));
}

#[tokio::test]
async fn backslash_copy_loads_csv_and_text_files() {
    let server = TestServer::start().await;
    let client = server.client().await;
    client
        .batch_execute(
            "CREATE TABLE people (id INT PRIMARY KEY, name TEXT, city TEXT DEFAULT 'nowhere')",
        )
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("people.csv");
    let mut data = String::from("id,name\n");
    for i in 0..500 {
        data.push_str(&format!("{i},\"Person, {i}\"\n"));
    }
    std::fs::write(&csv, data).unwrap();
    let command = format!(
        "\\copy people (id, name) from '{}' with (format csv, header true)",
        csv.display()
    );
    let (ok, out, err) = psql(&server, &["-c", &command]);
    assert!(ok, "{err}");
    assert!(out.contains("COPY 500"), "{out}");

    let text = dir.path().join("people.txt");
    std::fs::write(&text, "1000\tTab\\tName\tParis\n1001\t\\N\tRome\n").unwrap();
    let command = format!("\\copy people from '{}'", text.display());
    let (ok, out, err) = psql(&server, &["-c", &command]);
    assert!(ok, "{err}");
    assert!(out.contains("COPY 2"), "{out}");

    assert_eq!(
        column(&client, "SELECT count(*) FROM people").await,
        vec![Some("502".into())]
    );
    assert_eq!(
        column(&client, "SELECT name FROM people WHERE id = 7").await,
        vec![Some("Person, 7".into())]
    );
    assert_eq!(
        column(&client, "SELECT city FROM people WHERE id = 7").await,
        vec![Some("nowhere".into())]
    );
    assert_eq!(
        column(&client, "SELECT name FROM people WHERE id = 1000").await,
        vec![Some("Tab\tName".into())]
    );
    assert_eq!(
        column(&client, "SELECT name FROM people WHERE id = 1001").await,
        vec![None]
    );

    // A duplicate key anywhere fails the whole COPY.
    std::fs::write(&text, "2000\ta\tb\n7\tdup\tc\n").unwrap();
    let command = format!("\\copy people from '{}'", text.display());
    let (ok, _, err) = psql(&server, &["-v", "ON_ERROR_STOP=1", "-c", &command]);
    assert!(!ok);
    assert!(err.contains("duplicate key"), "{err}");
    assert_eq!(
        column(&client, "SELECT count(*) FROM people").await,
        vec![Some("502".into())]
    );
}

#[tokio::test]
async fn a_psql_session_runs_a_script() {
    let server = TestServer::start().await;
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("script.sql");
    std::fs::write(
        &script,
        "CREATE TABLE t (a INT PRIMARY KEY, b TEXT);\n\
         INSERT INTO t VALUES (1, 'x'), (2, 'y');\n\
         SELECT * FROM nope;\n\
         UPDATE t SET b = 'z' WHERE a = 2;\n\
         SELECT a || ':' || b FROM t ORDER BY a;\n",
    )
    .unwrap();
    let (_, out, err) = psql(&server, &["-At", "-f", script.to_str().unwrap()]);
    assert!(out.contains("INSERT 0 2") || out.contains("1:x"), "{out}");
    assert!(out.contains("1:x\n2:z"), "{out}");
    assert!(err.contains("relation \"nope\" does not exist"), "{err}");
}

#[tokio::test]
async fn psql_connects_over_tls() {
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    let status = Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=localhost",
        ])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .expect("openssl must be installed");
    assert!(
        status.status.success(),
        "{}",
        String::from_utf8_lossy(&status.stderr)
    );
    let server = TestServer::start_with(&[
        "--tls-cert",
        cert.to_str().unwrap(),
        "--tls-key",
        key.to_str().unwrap(),
    ])
    .await;
    let conn = format!(
        "host=127.0.0.1 port={} user=weir dbname=weir sslmode=require",
        server.addr.port()
    );
    let output = Command::new("psql")
        .args(["-X", &conn, "-c", "\\conninfo", "-c", "SELECT 40 + 2"])
        .output()
        .expect("psql");
    let out = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(out.contains("SSL connection"), "{out}");
    assert!(out.contains("42"), "{out}");
}
