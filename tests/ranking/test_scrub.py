"""Redacting what is already stored (`agentmemrec redact`), on both backends."""

from __future__ import annotations

from agentmemrec.ranking.memory import Memory
from agentmemrec.ranking.scrub import redact_in_windows, redact_stored

from helpers import BOTH


@BOTH
def test_redacting_what_is_stored_rewrites_it_in_place_and_a_repeated_write_finds_it(home, store_url):
    memory = Memory.open(home, store_url=store_url, redact=False)  # as `serve --no-redact` wrote
    items = [{"kind": "turn", "ref": "t1", "session": "s", "text": "docker login -u ci -p Xk9mm2pqQ reg.example.com"},
             {"kind": "turn", "session": "s", "text": "redis-cli -a Zq81hhs7Yw ping"},  # no ref: keyed by content
             {"kind": "turn", "session": "s", "text": "redis-cli -a Yq81hhs7Yw ping"},  # the same text, redacted
             {"kind": "turn", "session": "s", "text": "nothing secret in the docker login notes"}]
    ids = [r.ids[0] for r in memory.remember("p", items + [{"kind": "turn", "ref": "password=hunter22x",
                                                            "text": "a unit named by a secret"}])]
    assert memory.recall("p", "Xk9mm2pqQ").items  # found by its secret, before
    asked = memory.recall("p", "why did docker login -u ci -p Xk9mm2pqQ fail").slate_id  # a pasted prompt
    generation = memory.store.generation("p")
    dry = redact_stored(memory, "p", dry_run=True)
    assert dry["redacted"] == {"command-password": 3} and dry["queries"] == 1
    assert memory.store.generation("p") == generation
    assert "Xk9mm2pqQ" in memory.explain(asked, {"p"})["query"]
    report = redact_stored(memory, "p")
    assert report["redacted"] == {"command-password": 3} and report["queries"] == 1
    assert memory.explain(asked, {"p"})["query"] == "why did docker login -u ci -p [REDACTED:command-password] fail"
    assert sorted(u["id"] for u in report["units"]) == ids[:3]
    assert [u["id"] for u in report["named_by_a_secret"]] == [ids[4]]
    units = memory.store.units("p", ids)
    assert units[ids[0]].text == "docker login -u ci -p [REDACTED:command-password] reg.example.com"
    assert units[ids[0]].ref == "t1" and units[ids[3]].text == items[3]["text"]
    assert not memory.recall("p", "Xk9mm2pqQ").items  # nor by its secret, after
    assert memory.recall("p", "docker login").items[0].unit.id == ids[0]
    assert redact_stored(memory, "p")["units"] == []  # twice changes nothing
    # written again, redacted this time, the items are found stored: nothing is added or rewritten
    assert [r.outcome for r in memory.remember("p", items, redact=True)] == ["unchanged"] * 4
    assert memory.store.count_units("p") == 5
    memory.close()


@BOTH
def test_redacting_window_by_window_reads_each_unit_once_and_matches_one_pass(home, store_url):
    memory = Memory.open(home, store_url=store_url, redact=False)
    for n in range(7):  # another project's units between: a project's ids are not consecutive
        memory.remember("p", [{"kind": "turn", "session": "s", "text": f"step {n}: redis-cli -a Zq81hhs7Y{n} ping"},
                              {"kind": "turn", "session": "s", "text": f"step {n} left nothing secret"}])
        memory.remember("other", [{"kind": "turn", "text": f"redis-cli -a Kq81hhs7Y{n} ping"}])
    asked = memory.recall("p", "why does redis-cli -a Zq81hhs7Y0 ping fail").slate_id
    parts: list[dict] = []
    report = redact_in_windows(lambda after: parts.append(redact_stored(memory, "p", after=after, span=4)) or parts[-1],
                               lambda n: None)
    assert [p["read"] for p in parts] == [4, 4, 4, 2, 0]  # 14 units, then the call that finds none left
    assert [p["queries"] for p in parts] == [0, 0, 0, 0, 1]  # the saved queries, by the last call
    assert report["read"] == 14 and report["redacted"] == {"command-password": 7} and report["queries"] == 1
    assert sorted(u["id"] for u in report["units"]) == sorted(u["id"] for p in parts for u in p["units"])
    assert len(report["units"]) == 7
    assert "Zq81hhs7Y0" not in memory.explain(asked, {"p"})["query"]
    assert not memory.recall("p", "Zq81hhs7Y3").items
    assert memory.recall("other", "Kq81hhs7Y3").items  # another project's units are not read
    assert redact_stored(memory, "p", dry_run=True)["units"] == []  # one pass finds none left
    memory.close()
