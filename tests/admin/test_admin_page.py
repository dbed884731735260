"""The Locks page: what it shows, how it searches, filters, sorts and pages, and who may see it."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from html import unescape
from typing import Any

import pytest
from django.http import QueryDict
from django.test import Client
from django.urls import reverse

from tests.admin.tslock_test_providers import (
    MEMORY,
    AdvisoryStaticProvider,
    KVLikeMemoryProvider,
    StaticProvider,
    path_of,
)
from tslock_django import LockConfiguration
from tslock_django.conf import providers
from tslock_django.core.records import LockRecord, UnreadableRecord

pytestmark = pytest.mark.django_db


def record(
    name: str,
    *,
    until: timedelta = timedelta(minutes=5),
    since: timedelta = timedelta(minutes=1),
    now: datetime | None = None,
    **kw: Any,
) -> LockRecord:
    """A record ``until`` after ``now`` (by default the time of the call: under two test
    processes a module's tests can run minutes after its import), locked ``since``
    before it."""
    now = now or datetime.now(timezone.utc)
    defaults: dict[str, Any] = {"locked_by": "web-1:42", "fencing_token": 7, "token_fingerprint": "ab12cd34"}
    defaults.update(kw)
    return LockRecord(name=name, lock_until=now + until, locked_at=now - since, **defaults)


def static(*records: LockRecord, advisory: bool = False) -> dict[str, Any]:
    cls = AdvisoryStaticProvider if advisory else StaticProvider
    return {"BACKEND": path_of(cls), "OPTIONS": {"records": list(records)}}


def row_names(html: str) -> list[str]:
    return re.findall(r'<tr data-provider="[^"]*" data-name="([^"]*)"', html)


def link_of(html: str, link_id: str) -> str:
    """The query string of the page link with this id (unescaped)."""
    found = re.search(rf'<a href="([^"]*)" id="{link_id}"', html)
    assert found, f"no {link_id} link on the page"
    return unescape(found.group(1))


def next_link(html: str) -> str:
    return link_of(html, "next-page")


def test_superuser_sees_records_of_every_provider_without_raw_tokens(
    settings: Any, admin_client: Client, locks_url: str
) -> None:
    settings.TSLOCK_PROVIDERS = {"alpha": MEMORY, "beta": MEMORY}
    first = providers["alpha"].lock(LockConfiguration("nightly-report", "10m"))
    second = providers["beta"].lock(LockConfiguration("invoices", "10m"))
    assert first is not None and second is not None

    response = admin_client.get(locks_url)

    assert response.status_code == 200
    html = response.content.decode()
    assert row_names(html) == ["invoices", "nightly-report"]  # one table, by name across providers
    assert 'data-provider="alpha"' in html and 'data-provider="beta"' in html
    assert first.record.locked_by in html
    assert first.record.token_fingerprint in html and second.record.token_fingerprint in html
    assert first.token not in html and second.token not in html
    assert ">held<" in html


def test_columns_show_times_in_the_admin_time_zone_and_the_progress_bar(
    settings: Any, admin_client: Client, locks_url: str
) -> None:
    settings.TIME_ZONE = "Asia/Tokyo"
    locked_at = datetime(2031, 1, 1, 0, 0, tzinfo=timezone.utc)
    settings.TSLOCK_PROVIDERS = {
        "s": static(
            LockRecord(
                "future",
                lock_until=locked_at + timedelta(hours=1),
                locked_at=locked_at,
                locked_by="x",
                fencing_token=3,
            ),
            record("overdue", until=-timedelta(seconds=30), since=timedelta(minutes=5)),
        )
    }

    html = admin_client.get(locks_url, {"state": "all"}).content.decode()

    assert "2031-01-01T09:00:00+09:00" in html  # 00:00 UTC shown in Tokyo time, with its offset
    assert "2031-01-01T10:00:00+09:00" in html
    assert 'class="tslock-bar overdue"' in html  # the expired row's bar is marked overdue
    assert 'style="width: 100%"' in html
    assert 'style="width: 0%"' in html  # the future row has not started yet
    # 30 s overdue when the record was made; a loaded machine may take a few more to render.
    assert re.search(r"overdue (3\d|4\d)s", html), "the overdue row should say how long ago it ran out"


def test_every_state_is_shown(settings: Any, admin_client: Client, locks_url: str) -> None:
    settings.TSLOCK_PROVIDERS = {
        "s": static(
            record("a-held"),
            record("b-at-least", released=True, token_fingerprint=""),
            record("c-expired", until=-timedelta(minutes=1)),
            LockRecord(
                "d-unknown", lock_until=datetime(2030, 1, 1), locked_at=datetime(2030, 1, 1), locked_by="?"
            ),
        )
    }
    html = admin_client.get(locks_url, {"state": "all"}).content.decode()
    for label in ('tslock-state-held">held<', ">held for at-least<", ">expired<", ">unknown<"):
        assert label in html


@pytest.mark.parametrize("order", ["name", "-name", "lock_until", "-lock_until", "locked_at", "-locked_at"])
def test_an_unreadable_row_is_shown_in_every_order_and_cannot_be_selected(
    settings: Any, releaser: Client, locks_url: str, order: str
) -> None:
    settings.TSLOCK_PROVIDERS = {
        "s": static(
            record("a-held"), UnreadableRecord("b-bad", "s", "not JSON <b>\x1b</b>"), record("c-held")
        ),
        "m": {"BACKEND": "tslock_django.providers.memory.MemoryLockProvider"},
    }
    assert providers["m"].lock(LockConfiguration("m-held", "5m")) is not None
    html = releaser.get(locks_url, {"o": order}).content.decode()
    assert sorted(row_names(html)) == ["a-held", "b-bad", "c-held", "m-held"]
    bad_row = html[html.index('data-name="b-bad"') :].split("</tr>")[0]
    assert ">unknown<" in bad_row and 'name="lock"' not in bad_row and "cannot be released here" in bad_row
    assert "unreadable: not JSON &lt;b&gt;\\x1b&lt;/b&gt;" in bad_row  # escaped twice: terminal, then HTML
    assert html.count('name="lock"') == 3  # every readable row can be selected
    # Without times it sorts before every time (after, in reverse); by name, by its name.
    names = row_names(html)
    if order.lstrip("-") != "name":
        assert names.index("b-bad") == (3 if order.startswith("-") else 0)


def test_advisory_providers_are_marked(settings: Any, admin_client: Client, locks_url: str) -> None:
    settings.TSLOCK_PROVIDERS = {
        "db-like": static(record("strong-one")),
        "kv": static(record("kv-one", fencing_token=None), advisory=True),
    }
    html = admin_client.get(locks_url).content.decode()
    kv_row = html[html.index('data-name="kv-one"') :].split("</tr>")[0]
    strong_row = html[html.index('data-name="strong-one"') :].split("</tr>")[0]
    assert 'class="tslock-advisory"' in kv_row
    assert "tslock-advisory" not in strong_row


def test_strings_from_the_store_are_escaped(settings: Any, admin_client: Client, locks_url: str) -> None:
    evil = "<script>alert('x')</script>"
    settings.TSLOCK_PROVIDERS = {"s": static(record(evil, locked_by='<img src=x onerror="alert(1)">'))}
    html = admin_client.get(locks_url).content.decode()
    assert "<script>alert" not in html
    assert "<img src=x" not in html
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in html
    assert "&lt;img src=x onerror=&quot;alert(1)&quot;&gt;" in html


def test_a_token_a_store_leaks_into_a_listing_is_still_not_shown(
    settings: Any, admin_client: Client, locks_url: str
) -> None:
    leaked = "0123456789abcdef-raw-token"
    settings.TSLOCK_PROVIDERS = {"s": static(record("leaky", token=leaked, token_fingerprint=""))}
    html = admin_client.get(locks_url).content.decode()
    assert "leaky" in html
    assert leaked not in html


def test_search_by_name(settings: Any, admin_client: Client, locks_url: str) -> None:
    settings.TSLOCK_PROVIDERS = {
        "s": static(record("send-invoices"), record("nightly-report"), record("INVOICE-archive"))
    }
    html = admin_client.get(locks_url, {"q": "invoice"}).content.decode()
    assert sorted(row_names(html)) == ["INVOICE-archive", "send-invoices"]
    assert 'value="invoice"' in html


def test_filter_by_provider_lists_only_that_provider(
    settings: Any, admin_client: Client, locks_url: str
) -> None:
    settings.TSLOCK_PROVIDERS = {"a": static(record("from-a")), "b": static(record("from-b"))}
    StaticProvider.calls.clear()
    html = admin_client.get(locks_url, {"provider": "b"}).content.decode()
    assert row_names(html) == ["from-b"]
    assert StaticProvider.calls == ["b"]  # the other store was not asked at all


def test_filter_by_state(settings: Any, admin_client: Client, locks_url: str) -> None:
    settings.TSLOCK_PROVIDERS = {
        "s": static(
            record("live"),
            record("gone", until=-timedelta(seconds=1)),
            record("kept", released=True, token_fingerprint=""),
        )
    }

    def shown(**params: str) -> list[str]:
        return row_names(admin_client.get(locks_url, params).content.decode())

    assert shown() == ["kept", "live"]  # current locks by default: held and at-least
    assert shown(state="expired") == ["gone"]
    assert shown(state="held") == ["live"]
    assert shown(state="at_least") == ["kept"]
    assert shown(state="all") == ["gone", "kept", "live"]


@pytest.mark.parametrize(
    ("order", "expected"),
    [
        ("name", ["a", "b", "c"]),
        ("-name", ["c", "b", "a"]),
        ("lock_until", ["b", "c", "a"]),
        ("-lock_until", ["a", "c", "b"]),
        ("locked_at", ["c", "a", "b"]),
        ("-locked_at", ["b", "a", "c"]),
    ],
)
def test_sort_by_name_and_times(
    settings: Any, admin_client: Client, locks_url: str, order: str, expected: list[str]
) -> None:
    settings.TSLOCK_PROVIDERS = {
        "s": static(
            record("a", until=timedelta(hours=3), since=timedelta(minutes=2)),
            record("b", until=-timedelta(hours=1), since=timedelta(minutes=1)),
            record("c", until=timedelta(hours=2), since=timedelta(minutes=3)),
        )
    }
    html = admin_client.get(locks_url, {"o": order, "state": "all"}).content.decode()
    assert row_names(html) == expected
    column = order.lstrip("-")
    header = html[html.index(f"column-{column}") :].split("</th>")[0]
    assert "sorted" in header and ("descending" if order.startswith("-") else "ascending") in header


def test_only_name_and_times_are_sortable(settings: Any, admin_client: Client, locks_url: str) -> None:
    settings.TSLOCK_PROVIDERS = {"s": static(record("b"), record("a"))}
    html = admin_client.get(locks_url).content.decode()
    for column in ("name", "locked_at", "lock_until"):
        assert re.search(rf'class="sortable column-{column}[^"]*">\s*<div class="text"><a href=', html)
    for column in ("provider", "locked_by", "remaining", "state", "fencing_token", "fingerprint"):
        header = html[html.index(f"column-{column}") :].split("</th>")[0]
        assert "<a href" not in header
    # An old link sorting by another column falls back to the default order.
    assert row_names(admin_client.get(locks_url, {"o": "fencing_token"}).content.decode()) == ["a", "b"]


def test_large_listings_are_paged_by_cursor(settings: Any, admin_client: Client, locks_url: str) -> None:
    settings.TSLOCK_PROVIDERS = {"s": static(*(record(f"job-{i:04d}") for i in range(250)))}
    first = admin_client.get(locks_url).content.decode()
    assert row_names(first) == [f"job-{i:04d}" for i in range(100)]
    assert "250 locks" in first
    assert 'id="previous-page"' not in first and 'id="first-page"' not in first
    second = admin_client.get(locks_url + next_link(first)).content.decode()
    third = admin_client.get(locks_url + next_link(second)).content.decode()
    assert row_names(second) == [f"job-{i:04d}" for i in range(100, 200)]
    assert row_names(third) == [f"job-{i:04d}" for i in range(200, 250)]
    assert 'id="next-page"' not in third
    back = admin_client.get(locks_url + link_of(third, "previous-page")).content.decode()
    assert row_names(back) == row_names(second)


def test_no_add_change_or_delete_views(settings: Any, admin_client: Client) -> None:
    settings.TSLOCK_PROVIDERS = {"s": static(record("x"))}
    assert admin_client.get("/admin/tslock_django/lock/add/").status_code == 404
    assert admin_client.get("/admin/tslock_django/lock/x/change/").status_code == 404
    assert admin_client.get("/admin/tslock_django/lock/x/delete/").status_code == 404


# -- permissions ----------------------------------------------------------------------


def test_staff_without_view_lock_gets_403(
    settings: Any, make_client: Callable[..., Client], locks_url: str, history_url: str
) -> None:
    settings.TSLOCK_PROVIDERS = {"s": static(record("x"))}
    staff = make_client()  # staff, no permission at all
    assert staff.get(locks_url).status_code == 403
    assert staff.get(history_url).status_code == 403
    # And the admin index does not offer the page.
    assert locks_url not in staff.get(reverse("admin:index")).content.decode()


def test_change_permission_is_not_enough(
    settings: Any, make_client: Callable[..., Client], locks_url: str
) -> None:
    settings.TSLOCK_PROVIDERS = {"s": static(record("x"))}
    assert make_client("change_lock").get(locks_url).status_code == 403


def test_non_staff_gets_the_login_page(
    settings: Any, make_client: Callable[..., Client], locks_url: str
) -> None:
    settings.TSLOCK_PROVIDERS = {"s": static(record("x"))}
    for client in (make_client("view_lock", staff=False), Client()):
        response = client.get(locks_url)
        assert response.status_code == 302
        assert response["Location"].startswith(reverse("admin:login"))


def test_view_lock_shows_the_page_without_release_controls(
    settings: Any, viewer: Client, locks_url: str
) -> None:
    settings.TSLOCK_PROVIDERS = {"s": static(record("visible"))}
    response = viewer.get(locks_url)
    html = response.content.decode()
    assert response.status_code == 200
    assert row_names(html) == ["visible"]
    assert 'name="lock"' not in html
    assert "release-selected" not in html
    assert locks_url in viewer.get(reverse("admin:index")).content.decode()


def test_release_lock_shows_checkboxes_with_the_holding(
    settings: Any, releaser: Client, locks_url: str
) -> None:
    settings.TSLOCK_PROVIDERS = {
        "s": static(
            record("with-fencing", fencing_token=12), record("kv", fencing_token=None), advisory=False
        )
    }
    html = releaser.get(locks_url).content.decode()
    assert 'value="[&quot;s&quot;, &quot;with-fencing&quot;, &quot;fencing&quot;, 12]"' in html
    assert 'value="[&quot;s&quot;, &quot;kv&quot;, &quot;fingerprint&quot;, &quot;ab12cd34&quot;]"' in html


def test_unknown_filter_values_are_ignored(settings: Any, admin_client: Client, locks_url: str) -> None:
    settings.TSLOCK_PROVIDERS = {"s": static(record("x"))}
    html = admin_client.get(locks_url, {"provider": "nope", "state": "odd", "o": "secret"}).content.decode()
    assert row_names(html) == ["x"]


def test_a_broken_setting_is_a_message(settings: Any, admin_client: Client, locks_url: str) -> None:
    settings.TSLOCK_PROVIDERS = ["not", "a", "dict"]
    response = admin_client.get(locks_url)
    assert response.status_code == 200
    assert "TSLOCK_PROVIDERS is not configured correctly" in response.content.decode()


# -- one table across providers, paged by cursor ------------------------------------------


def kv_like(alias: str = "kv") -> dict[str, Any]:
    return {"BACKEND": path_of(KVLikeMemoryProvider), "OPTIONS": {}}


def test_next_and_previous_walk_two_providers(
    settings: Any, admin_client: Client, locks_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tslock_django.admin import LockAdmin

    monkeypatch.setattr(LockAdmin, "list_per_page", 3)
    settings.TSLOCK_PROVIDERS = {"a": MEMORY, "b": MEMORY}
    for i in range(5):
        assert providers["a"].lock(LockConfiguration(f"job-{2 * i}", "10m")) is not None
        assert providers["b"].lock(LockConfiguration(f"job-{2 * i + 1}", "10m")) is not None
    pages = [admin_client.get(locks_url, {"o": "-name"}).content.decode()]
    while 'id="next-page"' in pages[-1]:
        pages.append(admin_client.get(locks_url + next_link(pages[-1])).content.decode())
    shown = [name for html in pages for name in row_names(html)]
    assert shown == sorted((f"job-{i}" for i in range(10)), reverse=True)
    assert [len(row_names(html)) for html in pages] == [3, 3, 3, 1]
    assert "10 locks" in pages[0]
    # And back, page by page, to the first.
    html = pages[-1]
    for expected_page in reversed(pages[:-1]):
        html = admin_client.get(locks_url + link_of(html, "previous-page")).content.decode()
        assert row_names(html) == row_names(expected_page)
    assert 'id="previous-page"' not in html


def test_a_bad_cursor_is_a_400_with_a_way_back(settings: Any, admin_client: Client, locks_url: str) -> None:
    settings.TSLOCK_PROVIDERS = {"s": static(*(record(f"job-{i:04d}") for i in range(150)))}
    first = admin_client.get(locks_url, {"q": "job"}).content.decode()
    cursor = QueryDict(next_link(first)[1:])["cursor"]

    tampered = admin_client.get(locks_url, {"q": "job", "cursor": cursor[:-3] + "xyz"})
    other_filter = admin_client.get(locks_url, {"q": "job-0", "cursor": cursor})
    garbage = admin_client.get(locks_url, {"cursor": "not a cursor"})

    for response in (tampered, other_filter, garbage):
        assert response.status_code == 400
        html = response.content.decode()
        assert 'id="bad-cursor"' in html and 'id="first-page"' in html
    assert "not one this site gave out" in tampered.content.decode()
    assert "belongs to another listing" in other_filter.content.decode()
    assert f'href="{locks_url}?q=job-0"' in other_filter.content.decode()


def test_a_store_that_cannot_sort_says_so_and_is_left_out(
    settings: Any, admin_client: Client, locks_url: str
) -> None:
    settings.TSLOCK_PROVIDERS = {"db": MEMORY, "kv": kv_like()}
    assert providers["db"].lock(LockConfiguration("db-job", "10m")) is not None
    assert providers["kv"].lock(LockConfiguration("kv-job", "10m")) is not None

    by_name = admin_client.get(locks_url).content.decode()
    by_deadline = admin_client.get(locks_url, {"o": "lock_until"}).content.decode()

    assert row_names(by_name) == ["db-job", "kv-job"]
    assert "cannot sort" not in by_name
    assert row_names(by_deadline) == ["db-job"]
    assert (
        "Lock provider &#x27;kv&#x27; cannot sort by lock until; its locks are not in this order."
        in by_deadline
    )


def test_counts_are_shown_only_where_the_stores_have_them(
    settings: Any, admin_client: Client, locks_url: str
) -> None:
    settings.TSLOCK_PROVIDERS = {"db": MEMORY, "kv": kv_like()}
    for name in ("a", "b"):
        assert providers["db"].lock(LockConfiguration(name, "10m")) is not None
    assert providers["kv"].lock(LockConfiguration("c", "10m")) is not None

    both = admin_client.get(locks_url).content.decode()
    db_only = admin_client.get(locks_url, {"provider": "db"}).content.decode()
    kv_only = admin_client.get(locks_url, {"provider": "kv"}).content.decode()

    assert "db: 2; kv: not counted" in both
    assert "2 locks" in db_only
    count = re.search(r'<span class="small quiet" id="lock-count">([^<]*)</span>', kv_only)
    assert count and count.group(1).startswith("as of")  # no number it does not have


def test_a_store_that_cannot_page_back_offers_the_first_page(
    settings: Any, admin_client: Client, locks_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tslock_django.admin import LockAdmin

    monkeypatch.setattr(LockAdmin, "list_per_page", 2)
    settings.TSLOCK_PROVIDERS = {"db": MEMORY, "kv": kv_like()}
    for name in ("a", "b", "c"):
        assert providers["db"].lock(LockConfiguration(f"{name}-db", "10m")) is not None
        assert providers["kv"].lock(LockConfiguration(f"{name}-kv", "10m")) is not None
    first = admin_client.get(locks_url, {"q": "-"}).content.decode()
    second = admin_client.get(locks_url + next_link(first)).content.decode()
    assert row_names(second) == ["b-db", "b-kv"]
    assert 'id="previous-page"' not in second
    assert link_of(second, "first-page") == "?q=-"
    assert "Lock provider &#x27;kv&#x27; cannot page backwards" in second
    assert "searches only the keys it reads per page" in second
