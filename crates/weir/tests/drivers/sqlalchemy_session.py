"""A SQLAlchemy 2 session against Weir (psycopg 3 underneath):
python3 sqlalchemy_session.py DSN.

The dialect initialises (it reads the server version, settings and
savepoint support), a table is orders from the catalog (columns, types,
nullability, primary key), Core inserts with parameters and selects with
bound filters, the ORM adds, queries, updates and deletes objects in
transactions (one rolled back, one failed on a duplicate key inside a
savepoint), a schema is created with create_all inside its transaction
(a uuid key, an autoincrement key, an identity key and an index
included; the autoincrement and identity keys are numbered by the
server and come back through RETURNING) and a table created in a
rolled-back transaction is gone, and a materialized view is read after
FLUSH. Any difference
raises; the last line printed is "ok".
"""

import datetime
import decimal
import sys
import uuid
from typing import Optional

from sqlalchemy import (
    BigInteger,
    Date,
    Identity,
    Integer,
    MetaData,
    Numeric,
    String,
    Table,
    Uuid,
    create_engine,
    func,
    insert,
    inspect,
    select,
    text,
)
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column


def check(what, got, expected):
    if got != expected:
        raise AssertionError(f"{what}: got {got!r}, expected {expected!r}")


class Base(DeclarativeBase):
    pass


class Order(Base):
    __tablename__ = "sa_orders"
    # Keys given by the application.
    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    customer: Mapped[str] = mapped_column(String, nullable=False)
    amount: Mapped[Optional[decimal.Decimal]] = mapped_column(Numeric(10, 2))
    placed: Mapped[Optional[datetime.date]] = mapped_column(Date)
    note: Mapped[Optional[str]] = mapped_column(String(12), server_default="none")


class Item(Base):
    __tablename__ = "sa_items"
    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)
    name: Mapped[str] = mapped_column(String(20), index=True)


class Ticket(Base):
    __tablename__ = "sa_tickets"
    # SQLAlchemy's default for an integer key: SERIAL, ids from RETURNING.
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    title: Mapped[str] = mapped_column(String)
    # A UNIQUE constraint besides the key.
    code: Mapped[Optional[str]] = mapped_column(String(8), unique=True)


class Event(Base):
    __tablename__ = "sa_events"
    id: Mapped[int] = mapped_column(BigInteger, Identity(always=True, start=100), primary_key=True)
    kind: Mapped[str] = mapped_column(String)


def main(dsn):
    engine = create_engine(f"postgresql+psycopg://{dsn}")
    # Views and drops run outside transaction blocks: they go through an
    # autocommit connection (docs/drivers.md).
    ddl = engine.execution_options(isolation_level="AUTOCOMMIT")
    with ddl.connect() as conn:
        conn.execute(text("DROP MATERIALIZED VIEW IF EXISTS sa_totals"))
        conn.execute(text("DROP TABLE IF EXISTS sa_orders"))
        conn.execute(text("DROP TABLE IF EXISTS sa_items"))
        conn.execute(text("DROP TABLE IF EXISTS sa_scratch"))
        conn.execute(text("DROP TABLE IF EXISTS sa_tickets"))
        conn.execute(text("DROP TABLE IF EXISTS sa_events"))
    # create_all as applications call it: CREATE TABLE and CREATE INDEX
    # inside the transaction SQLAlchemy opens.
    Base.metadata.create_all(engine)
    with Session(engine) as session:
        first = Item(name="first")
        session.add_all([first, Item(name="second")])
        session.commit()
        check("uuid key", session.get(Item, first.id).name, "first")
        check("by indexed name", session.scalars(select(Item.id).where(Item.name == "first")).one(), first.id)
    check("index made in a block", [i["name"] for i in inspect(engine).get_indexes("sa_items")], ["ix_sa_items_name"])
    # Keys the server numbers: SERIAL and an identity column.
    with Session(engine) as session:
        tickets = [Ticket(title="first"), Ticket(title="second")]
        events = [Event(kind="open"), Event(kind="close")]
        session.add_all(tickets + events)
        session.flush()
        check("serial keys", [t.id for t in tickets], [1, 2])
        check("identity keys", [e.id for e in events], [100, 101])
        session.rollback()
    with Session(engine) as session:
        third = Ticket(title="third")
        session.add(third)
        session.commit()
        # Numbers taken by the rolled-back block are not given back.
        check("serial key after a rollback", third.id, 3)
        check("stored tickets", session.scalars(select(Ticket.title)).all(), ["third"])
    # The unique constraint: enforced (IntegrityError, 23505), NULLs free,
    # and reflected.
    with Session(engine) as session:
        session.add_all([Ticket(title="coded", code="T1"), Ticket(title="plain"), Ticket(title="plain too")])
        session.commit()
        session.add(Ticket(title="again", code="T1"))
        try:
            session.commit()
            check("duplicate code refused", False, True)
        except IntegrityError as e:
            check("duplicate code refused", e.orig.sqlstate, "23505")
            session.rollback()
    check(
        "reflected unique constraint",
        [(u["name"], u["column_names"]) for u in inspect(engine).get_unique_constraints("sa_tickets")],
        [("sa_tickets_code_key", ["code"])],
    )
    tickets = {c["name"]: c for c in inspect(engine).get_columns("sa_tickets")}
    check("reflected serial default", tickets["id"]["default"], "nextval('sa_tickets_id_seq'::regclass)")
    check("reflected autoincrement", tickets["id"]["autoincrement"], True)
    events = {c["name"]: c for c in inspect(engine).get_columns("sa_events")}
    # The identity column has no default (PostgreSQL keeps none for it);
    # its options are not reflected yet (no pg_sequence rows).
    check("reflected identity column's default", events["id"]["default"], None)
    with engine.connect() as conn:
        block = conn.begin()
        conn.execute(text("CREATE TABLE sa_scratch (id INT PRIMARY KEY)"))
        conn.execute(text("INSERT INTO sa_scratch VALUES (1)"))
        check("table made in the block", conn.execute(text("SELECT count(*) FROM sa_scratch")).scalar(), 1)
        block.rollback()
    check("rolled-back table", inspect(engine).has_table("sa_scratch"), False)

    # The catalog: the table is listed, and reflected as it was declared.
    inspector = inspect(engine)
    check("tables", "sa_orders" in inspector.get_table_names(), True)
    check("has table", inspector.has_table("sa_orders"), True)
    check("no such table", inspector.has_table("sa_missing"), False)
    columns = {c["name"]: c for c in inspector.get_columns("sa_orders")}
    check("reflected columns", list(columns), ["id", "customer", "amount", "placed", "note"])
    check("reflected numeric", (columns["amount"]["type"].precision, columns["amount"]["type"].scale), (10, 2))
    check("reflected varchar", columns["note"]["type"].length, 12)
    check("reflected default", columns["note"]["default"], "'none'::character varying")
    check("reflected nullability", (columns["customer"]["nullable"], columns["amount"]["nullable"]), (False, True))
    check(
        "reflected key",
        inspector.get_pk_constraint("sa_orders"),
        {"constrained_columns": ["id"], "name": "sa_orders_pkey", "comment": None, "dialect_options": {"postgresql_include": []}},
    )
    check("reflected indexes", inspector.get_indexes("sa_orders"), [])
    reflected = Table("sa_orders", MetaData(), autoload_with=engine)
    check("autoloaded key", [c.name for c in reflected.primary_key.columns], ["id"])
    check("autoloaded types", str(reflected.c.placed.type), "DATE")
    orders = Order.__table__

    # Core: parameters in, typed rows out.
    with engine.begin() as conn:
        conn.execute(
            insert(orders),
            [
                {"id": 1, "customer": "ann", "amount": decimal.Decimal("10.50"), "placed": datetime.date(2024, 1, 1)},
                {"id": 2, "customer": "bob", "amount": decimal.Decimal("20.00"), "placed": datetime.date(2024, 1, 2)},
            ],
        )
    with engine.connect() as conn:
        rows = conn.execute(
            select(orders.c.customer, orders.c.amount)
            .where(orders.c.amount > decimal.Decimal("15"))
            .order_by(orders.c.id)
        ).all()
        check("core select", [tuple(r) for r in rows], [("bob", decimal.Decimal("20.00"))])
        total = conn.execute(select(func.sum(orders.c.amount))).scalar_one()
        check("core sum", total, decimal.Decimal("30.50"))

    # ORM: a unit of work, a rollback, a failed savepoint.
    with Session(engine) as session:
        fresh = Order(id=3, customer="cy", amount=decimal.Decimal("5.25"), placed=datetime.date(2024, 1, 3))
        session.add(fresh)
        session.flush()
        # The server default came back through INSERT ... RETURNING.
        check("server default returned", fresh.__dict__.get("note"), "none")
        session.commit()
        order = session.get(Order, 3)
        check("orm get", (order.customer, order.amount), ("cy", decimal.Decimal("5.25")))
        order.amount = decimal.Decimal("6.00")
        session.commit()
        session.add(Order(id=4, customer="dee", amount=decimal.Decimal("1.00"), placed=datetime.date(2024, 1, 4)))
        session.flush()
        session.rollback()
        check("rolled back", session.get(Order, 4), None)
        with session.begin_nested():
            pass
        try:
            with session.begin_nested():
                session.add(Order(id=1, customer="dup", amount=None, placed=None))
                session.flush()
            raise AssertionError("a duplicate key was accepted")
        except IntegrityError as error:
            check("duplicate sqlstate", error.orig.sqlstate, "23505")
        session.add(Order(id=5, customer="eve", amount=decimal.Decimal("7.75"), placed=None))
        session.commit()
        names = session.scalars(select(Order.customer).order_by(Order.id)).all()
        check("orm names", names, ["ann", "bob", "cy", "eve"])
        session.delete(session.get(Order, 2))
        session.commit()
        check("orm count", session.scalar(select(func.count()).select_from(Order)), 3)
        amount = session.scalar(select(Order.amount).where(Order.id == 3))
        check("orm update", amount, decimal.Decimal("6.00"))

    # A materialized view, read after FLUSH.
    with ddl.connect() as conn:
        conn.execute(
            text(
                "CREATE MATERIALIZED VIEW sa_totals AS SELECT customer, sum(amount) AS total"
                " FROM sa_orders GROUP BY customer"
            )
        )
        conn.execute(text("INSERT INTO sa_orders VALUES (6, 'ann', 1.00, NULL)"))
        conn.execute(text("FLUSH"))
        totals = conn.execute(text("SELECT customer, total FROM sa_totals ORDER BY customer")).all()
        check(
            "view",
            [tuple(r) for r in totals],
            [("ann", decimal.Decimal("11.50")), ("cy", decimal.Decimal("6.00")), ("eve", decimal.Decimal("7.75"))],
        )
    engine.dispose()
    print("ok")


if __name__ == "__main__":
    main(sys.argv[1])
