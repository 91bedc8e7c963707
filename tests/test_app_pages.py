"""The Streamlit pages through AppTest: the real app.py, the real core, a temporary database.

Offline settings come from the environment (MARGINALIA_DB / _EMBEDDER / _ANSWERER) the way a
user's shell would set them; the Gemini tests point GEMINI_API_KEY and GOOGLE_GEMINI_BASE_URL
at the fake Gemini server. Caches are process-global, so every test starts and ends with
them cleared.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
import streamlit as st
from conftest import ROOT, SAMPLES, margin_cards, settle
from streamlit.testing.v1 import AppTest

from marginalia_core.ingest.chunking import chunk_text
from marginalia_core.ingest.pipeline import ingest_bytes
from marginalia_core.lab import RetrievalLab
from marginalia_core.providers.embeddings.local import DEFAULT_THRESHOLD
from marginalia_core.store.sqlite import Store

APP = str(ROOT / "app.py")
DOCUMENTS = "pages/documents.py"
INSPECTOR = "pages/inspector.py"
FERMAT = "What did Fermat write in the margin?"
GOOD_MD = b"""# Sourdough notes

A sourdough starter is a mixture of flour and water that wild yeast and bacteria ferment.
Feed the starter every day with equal weights of flour and water to keep it active.
A healthy starter doubles in size within six hours of feeding at room temperature.
"""
HOSTILE_NAME = "<img src=x onerror=alert(1)> **notes**.md"
HOSTILE_MD = b"""Quinces are hard, fragrant fruit that turn pink when they are slowly cooked.
<script>window.__pwned=1</script> <img src="http://example.invalid/x.png">
![pixel](http://example.invalid/pixel.png) and [a link](http://example.invalid/page)

Quince paste is made by cooking quinces with sugar for several hours until it sets.
"""
UNESCAPED = re.compile(r"(?<!\\)(<|!\[|\]\()")
MARK_LINK = re.compile(r"\[\\\[(\d+)\\\]\]\(#src-[\w-]+\)")


@pytest.fixture
def app_env(db_path, monkeypatch):
    monkeypatch.setenv("MARGINALIA_DB", str(db_path))
    monkeypatch.setenv("MARGINALIA_EMBEDDER", "local")
    monkeypatch.setenv("MARGINALIA_ANSWERER", "extractive")
    st.cache_resource.clear()
    st.cache_data.clear()
    yield db_path
    st.cache_resource.clear()
    st.cache_data.clear()


@pytest.fixture
def gemini_env(db_path, monkeypatch, fake_gemini):
    monkeypatch.setenv("MARGINALIA_DB", str(db_path))
    monkeypatch.setenv("GEMINI_API_KEY", fake_gemini.api_key)
    monkeypatch.setenv("GOOGLE_GEMINI_BASE_URL", fake_gemini.base_url)
    monkeypatch.setenv("MARGINALIA_GEMINI_TIMEOUT", "5")
    for var in ("MARGINALIA_EMBEDDER", "MARGINALIA_ANSWERER"):
        monkeypatch.delenv(var, raising=False)
    st.cache_resource.clear()
    st.cache_data.clear()
    yield fake_gemini
    st.cache_resource.clear()
    st.cache_data.clear()


def start(page: str | None = None) -> AppTest:
    at = AppTest.from_file(APP, default_timeout=60).run()
    assert not at.exception
    if page:
        at.switch_page(page).run()
        assert not at.exception
    return at


def seed(ws, *files: tuple[str, bytes]) -> list[dict]:
    docs = []
    for name, data in files:
        end = list(ingest_bytes(ws.store, ws.embedder, ws.settings, name, data))[-1]
        assert end["type"] == "done", end
        docs.append(end["document"])
    return docs


def samples() -> list[tuple[str, bytes]]:
    return [(p.name, p.read_bytes()) for p in sorted(SAMPLES.iterdir())
            if p.suffix in (".md", ".pdf")]




def plain(markdown: str) -> str:
    """Escaped markdown back to its text (good enough for assertions)."""
    return re.sub(r"\\(.)", r"\1", markdown)


def markdown_values(at: AppTest) -> list[str]:
    return [m.value for m in at.markdown] + [m.value for m in at.sidebar.markdown]


def full_table(at: AppTest):
    return next(d.value for d in at.dataframe if "excerpt" in d.value.columns)


def metric(at: AppTest, label_start: str) -> str:
    return next(m.value for m in at.metric if m.label.startswith(label_start))


# --------------------------------------------------------------------------- chat


def test_empty_library_offers_the_sample_documents(app_env):
    at = start()
    assert any("Your library is empty" in v for v in markdown_values(at))
    assert any("Offline mode" in v for v in at.sidebar.markdown.values)
    assert any("all-MiniLM-L6-v2" in plain(c.value) for c in at.sidebar.caption)

    at.button(key="try_samples").click().run()
    assert not at.exception
    statuses = list(at.status)
    assert len(statuses) == 3
    assert all(s.state == "complete" and "indexed" in s.label for s in statuses)
    assert any("Added 3 sample documents" in v for v in markdown_values(at))

    at.button(key="suggest-0").click().run()  # a suggested question, answered offline
    assert not at.exception
    assert [m.name for m in at.chat_message] == ["user", "assistant"]
    answer = at.chat_message[1].markdown[0].value
    assert "Fermat" in answer and MARK_LINK.search(answer)


def test_question_streams_a_cited_answer_and_a_pill_opens_its_passage(app_env, workspace):
    seed(workspace, *samples())
    at = start()
    at.chat_input[0].set_value(FERMAT).run()
    assert not at.exception
    assert [m.name for m in at.chat_message] == ["user", "assistant"]
    answer = at.chat_message[1].markdown[0].value
    assert "Fermat" in answer
    marks = [int(n) for n in MARK_LINK.findall(answer)]
    assert marks and "[1]" not in MARK_LINK.sub("", answer)

    # the margin: one card per source, "[n] document · section ‘…’ · 82 %" (a Markdown file is
    # in sections by heading, not pages), the first cited one open after the answer, its cited
    # sentence highlighted
    cards = margin_cards(at)
    assert cards
    for card in cards:
        assert re.fullmatch(r"\[\d\] .+\.md · sections? \u2018.+\u2019 · \d+ %", card.label), \
            card.label
    opened = [c for c in cards if c.is_open]
    assert len(opened) == 1 and opened[0].label.startswith(f"[{marks[0]}]")
    assert any("Fermat" in m for m in opened[0].marked)
    # each mark links to its card
    for n in marks:
        assert any(c.label.startswith(f"[{n}]") and f"(#{c.id})" in answer for c in cards)
    pills = at.pills[0]
    assert pills.options[0].startswith("\\[")

    # a pill opens that card instead
    last = int(re.match(r"\\\[(\d+)", pills.options[-1]).group(1))
    pills.set_value(last).run()
    assert not at.exception
    opened = [c for c in margin_cards(at) if c.is_open]
    assert len(opened) == 1 and opened[0].label.startswith(f"[{last}]")

    # saved with only the cited sources; listed in the sidebar
    convs = workspace.store.list_conversations()
    assert len(convs) == 1 and convs[0].title == FERMAT
    saved = workspace.store.messages(convs[0].id)[-1].sources
    assert {s["n"] for s in saved} == {int(re.match(r"\\\[(\d+)", o).group(1)) for o in pills.options}
    assert at.sidebar.button(key=f"conv-{convs[0].id}")


def test_reopened_conversation_shows_its_saved_sources(app_env, workspace):
    seed(workspace, *samples())
    events = list(workspace.chat.ask(FERMAT))
    cid = events[-1]["conversation_id"]
    saved = workspace.store.messages(cid)[-1].sources
    assert saved

    at = start()  # a new session: starts on a new conversation
    assert not at.chat_message
    at.sidebar.button(key=f"conv-{cid}").click().run()
    assert not at.exception
    assert [m.name for m in at.chat_message] == ["user", "assistant"]
    labels = [c.label for c in margin_cards(at)]
    assert len(labels) == len(saved)
    for source, label in zip(saved, labels, strict=True):
        assert label.startswith(f"[{source['n']}]")
        assert f"{round(source['score'] * 100)} %" in label
    assert sum(c.is_open for c in margin_cards(at)) == 1  # the first cited, as when asked
    assert MARK_LINK.search(at.chat_message[1].markdown[0].value)
    at.pills[0].set_value(saved[0]["n"]).run()
    assert margin_cards(at)[0].is_open

    # a follow-up goes into the same conversation
    at.chat_input[0].set_value("When was it proved?").run()
    assert not at.exception
    assert len(at.chat_message) == 4
    assert len(workspace.store.list_conversations()) == 1

    # delete it from the sidebar, after confirming
    at.sidebar.button(key=f"del-conv-{cid}").click().run()
    assert workspace.store.list_conversations()
    at.sidebar.button(key=f"confirm-del-conv-{cid}").click().run()
    assert not at.exception
    assert workspace.store.list_conversations() == []
    assert not at.chat_message


def test_document_markup_and_names_are_shown_as_text(app_env, workspace):
    seed(workspace, (HOSTILE_NAME, HOSTILE_MD))
    at = start()
    at.chat_input[0].set_value("How is quince paste made?").run()
    assert not at.exception
    at.pills[0].set_value(1).run()
    card = margin_cards(at)[0]
    assert card.is_open
    # raw HTML is text; the image is its alt text; the link its text, without an address
    assert "<script>window.__pwned=1</script>" in card.text
    assert "pixel" in card.text and "a link" in card.text and "example.invalid/page" not in card.text
    assert not {"script", "img"} & set(card.tags)
    assert card.links == [f"#{card.id}"]
    assert HOSTILE_NAME in card.label
    texts = markdown_values(at) + [e.label for e in at.expander] + list(at.pills[0].options)
    texts += [b.label for b in at.sidebar.button]
    for text in texts:  # the only links are our own marks, to margin cards
        assert not UNESCAPED.search(MARK_LINK.sub("", text)), text
    assert not any(m.proto.allow_html for m in at.markdown)
    assert not any(m.proto.allow_html for m in at.sidebar.markdown)


def test_answer_failure_is_reported_in_the_chat(gemini_env, gemini_settings):
    from marginalia_core.workspace import Workspace

    ws = Workspace(gemini_settings)
    seed(ws, ("sourdough.md", GOOD_MD))
    gemini_env.stream_script(error_after=1, error_code=500, error_message="backend exploded")
    at = start()
    at.chat_input[0].set_value("How often should I feed a sourdough starter?").run()
    assert not at.exception
    assert at.error and "interrupted" in at.error[0].value
    assert ws.store.list_conversations() == []  # a failed answer is never saved
    at.run()  # the failed turn stays visible as a message, not a traceback
    assert not at.exception
    assert at.error and [m.name for m in at.chat_message] == ["user", "assistant"]
    ws.close()


def test_gemini_mode_is_labelled_and_answers_from_the_fake_server(gemini_env, db_path):
    at = start()
    assert any("Gemini mode" in v for v in at.sidebar.markdown.values)
    caption = plain(" ".join(c.value for c in at.sidebar.caption))
    assert "gemini-embedding-001" in caption and "gemini-2.5-flash" in caption

    at.switch_page(DOCUMENTS).run()
    at.file_uploader[0].set_value([("sourdough.md", GOOD_MD, "text/markdown")]).run()
    assert not at.exception
    settle(at, db_path)
    assert "indexed" in at.status[0].label
    assert gemini_env.requests_for("embed")

    at.switch_page("pages/chat.py").run()
    at.chat_input[0].set_value("How often should I feed a sourdough starter?").run()
    assert not at.exception
    answer = at.chat_message[1].markdown[0].value
    assert answer.startswith("According to the sources") and MARK_LINK.search(answer)
    assert gemini_env.requests_for("stream")
    assert margin_cards(at)


def test_an_invented_citation_is_flagged_text_not_a_source(gemini_env, gemini_settings):
    from marginalia_core.workspace import Workspace

    ws = Workspace(gemini_settings)
    seed(ws, ("sourdough.md", GOOD_MD))
    gemini_env.set_answer("Feed it every day [1]. It was invented in 1066 [7].")
    at = start()
    at.chat_input[0].set_value("How often should I feed a sourdough starter?").run()
    assert not at.exception
    answer = at.chat_message[1].markdown[0].value
    assert MARK_LINK.findall(answer) == ["1"] and ":red[\\[7\\]]" in answer
    assert any("\\[7\\] in this answer does not match" in c.value for c in at.caption)
    assert at.pills[0].options == ["\\[1\\] sourdough\\.md"]  # no pill for [7], no page
    ws.close()


def test_gemini_key_from_secrets(app_env, monkeypatch, fake_gemini):
    monkeypatch.delenv("MARGINALIA_EMBEDDER")
    monkeypatch.delenv("MARGINALIA_ANSWERER")
    monkeypatch.setenv("GOOGLE_GEMINI_BASE_URL", fake_gemini.base_url)
    at = AppTest.from_file(APP, default_timeout=60)
    at.secrets["GEMINI_API_KEY"] = fake_gemini.api_key
    at.run()
    assert not at.exception
    assert any("Gemini mode" in v for v in at.sidebar.markdown.values)


# --------------------------------------------------------------------------- documents


def test_upload_indexes_good_files_and_refuses_bad_ones_with_a_reason(app_env):
    at = start(DOCUMENTS)
    assert any("No documents yet" in v for v in markdown_values(at))
    at.file_uploader[0].set_value(
        [
            ("sourdough.md", GOOD_MD, "text/markdown"),
            ("scan.pdf", b"this is not really a pdf", "application/pdf"),
        ]
    ).run()
    assert not at.exception
    settle(at, app_env)
    by_label = {s.label: s for s in at.status}
    good = next(s for label, s in by_label.items() if label.startswith("sourdough\\.md — indexed"))
    bad = next(s for label, s in by_label.items() if label.startswith("scan\\.pdf — refused"))
    assert good.state == "complete" and bad.state == "error"
    assert "not a PDF" in bad.markdown[0].value
    assert any("1 indexed, 1 refused" in v for v in markdown_values(at))
    table = at.dataframe[0].value
    assert table["Document"].tolist() == ["sourdough.md"]
    assert {"Document", "Size", "Passages", "Pages", "Added", "Embedder"} <= set(table.columns)
    assert table["Embedder"].iloc[0].startswith("all-MiniLM-L6-v2")

    # the same bytes again: noted as a duplicate, not indexed twice
    at.file_uploader[0].set_value([("copy.md", GOOD_MD, "text/markdown")]).run()
    assert not at.exception
    settle(at, app_env)
    assert "already in your library" in at.status[0].label
    assert len(at.dataframe[0].value) == 1


def test_a_refusal_is_still_shown_after_a_reload_until_it_is_cleared(app_env):
    at = start(DOCUMENTS)
    at.file_uploader[0].set_value(
        [
            ("sourdough.md", GOOD_MD, "text/markdown"),
            ("scan.pdf", b"this is not really a pdf", "application/pdf"),
        ]
    ).run()
    settle(at, app_env)

    # a reload: a new browser session, which never saw the upload
    again = start(DOCUMENTS)
    head = next(v for v in markdown_values(again) if "1 indexed, 1 refused" in v)
    assert head.startswith("**Upload of ")  # not "Last upload": this tab did not make it
    bad = next(s for s in again.status if s.label.startswith("scan\\.pdf — refused"))
    assert bad.state == "error" and "not a PDF" in bad.markdown[0].value

    again.button(key="clear_results").click().run()
    assert not any("refused" in v for v in markdown_values(again))
    third = start(DOCUMENTS)  # cleared in the library, so a reload no longer brings it back
    assert not any("refused" in v for v in markdown_values(third))
    assert third.dataframe[0].value["Document"].tolist() == ["sourdough.md"]


def test_a_batch_that_indexed_everything_is_not_shown_again_after_a_reload(app_env):
    at = start(DOCUMENTS)
    at.file_uploader[0].set_value([("sourdough.md", GOOD_MD, "text/markdown")]).run()
    settle(at, app_env)
    assert any("Last upload: 1 indexed" in v.replace("**", "") for v in markdown_values(at))
    again = start(DOCUMENTS)
    assert not any("upload" in v.lower() and "indexed" in v for v in markdown_values(again))


def test_delete_asks_for_confirmation(app_env, workspace):
    keep, gone = seed(workspace, ("sourdough.md", GOOD_MD), ("quinces.md", HOSTILE_MD))
    at = start(DOCUMENTS)
    assert len(at.dataframe[0].value) == 2
    at.multiselect(key="delete_selection").select(gone["id"]).run()
    at.button(key="delete_documents").click().run()
    assert at.warning and "cannot be undone" in at.warning[0].value
    assert len(workspace.store.list_documents()) == 2  # nothing deleted yet
    at.button(key="cancel_delete").click().run()
    assert len(workspace.store.list_documents()) == 2

    at.multiselect(key="delete_selection").select(gone["id"]).run()
    at.button(key="delete_documents").click().run()
    at.button(key="confirm_delete").click().run()
    assert not at.exception
    assert [d.id for d in workspace.store.list_documents()] == [keep["id"]]
    assert at.success and "Deleted 1 document" in at.success[0].value
    assert at.dataframe[0].value["Document"].tolist() == ["sourdough.md"]


def test_documents_of_another_embedder_get_a_notice_and_a_reindex_button(app_env, store):
    text = GOOD_MD.decode()
    chunks = chunk_text(text, target=1400, overlap=200)
    store.add_document(
        name="old.md", mime="text/markdown", size=len(GOOD_MD), content_hash="0" * 64,
        embed_model="some-old-model", embed_dim=8, chunks=chunks,
        embeddings=np.ones((len(chunks), 8), dtype=np.float32), chunk_target=1400,
        chunk_overlap=200, text=text, page_starts=[0],
    )
    at = start(DOCUMENTS)
    assert at.warning and "some\\-old\\-model" in at.warning[0].value
    assert at.dataframe[0].value["Searchable"].tolist() == [False]
    at.button(key="reindex_stale").click().run()
    assert not at.exception
    assert not at.warning
    (doc,) = store.list_documents()
    assert doc.embed_model.startswith("all-MiniLM-L6-v2") and doc.embed_dim == 384


def test_sample_documents_from_the_documents_page(app_env):
    at = start(DOCUMENTS)
    at.button(key="try_samples_docs").click().run()
    assert not at.exception
    assert len(at.dataframe[0].value) == 3
    assert sorted(at.dataframe[0].value["Document"]) == [name for name, _ in samples()]


# --------------------------------------------------------------------------- inspector


def test_page_labels_only_for_pdfs_in_the_inspector_and_the_documents_table(app_env, workspace):
    """A text or Markdown file is stored as one page 1: no table or label shows that page (a
    Markdown file with headings names its sections instead)."""
    seed(workspace, *samples())
    at = start(INSPECTOR)
    at.text_input(key="inspector_query").input("How should old books be stored?").run()
    assert not at.exception
    table = full_table(at)
    pages = dict(zip(table["document"], table["page"], strict=False))
    md_pages = {p for d, p in zip(table["document"], table["page"], strict=True)
                if d.endswith(".md")}
    pdf_pages = {p for d, p in zip(table["document"], table["page"], strict=True)
                 if d.endswith(".pdf")}
    assert md_pages and all(p.startswith("\u2018") for p in md_pages), pages  # ‘Heading’
    assert pdf_pages and all(p and p[0].isdigit() for p in pdf_pages), pages
    # the selected passage's header (the best one: the PDF's) names its page
    header = next(v for v in markdown_values(at) if " · cosine " in v and "passage " in v)
    assert re.search(r"\.pdf\*\* · pp?\. \d", header), header
    # the ticking list of a question set names pages for the PDF only
    at.button_group(key="inspector_section").set_value("Question sets").run()
    at.text_input(key="inspector_query").input("How should old books be stored?").run()
    assert not at.exception
    ticks = [c.label.replace("\\", "") for c in at.checkbox if c.key.startswith("tick-")]
    assert ticks and not any(".md · p." in t for t in ticks), ticks
    assert any(re.search(r"\.pdf · pp?\. \d", t) for t in ticks), ticks
    for row in workspace.score_table("How should old books be stored?"):
        md = row["document"].endswith(".md")
        assert row["page"].startswith("section") if md else row["page"][0].isdigit(), row

    at.switch_page(DOCUMENTS).run()
    assert not at.exception
    docs = next(d.value for d in at.dataframe if "Pages" in d.value.columns)
    by_name = dict(zip(docs["Document"], docs["Pages"], strict=True))
    assert all(re.fullmatch(r"\d+ sections", by_name[n]) for n in by_name if n.endswith(".md")), \
        by_name
    assert all(by_name[n].isdigit() for n in by_name if n.endswith(".pdf")), by_name


def test_inspector_explains_every_candidate_with_a_threshold_and_histogram(app_env, workspace):
    seed(workspace, *samples())
    total = sum(d.chunk_count for d in workspace.store.list_documents())
    at = start(INSPECTOR)
    at.text_input(key="inspector_query").input(FERMAT).run()
    assert not at.exception

    table = full_table(at)
    assert list(table.columns) == [
        "returned", "document", "page", "hybrid score", "hybrid rank", "cosine",
        "meaning rank", "bm25", "keyword rank", "passes", "excerpt",
    ]
    explained = RetrievalLab(workspace).explain(FERMAT)
    assert len(table) == len(explained) == total  # a small library: every passage is a candidate
    assert table["hybrid score"].is_monotonic_decreasing  # hybrid: ordered by its score
    assert table["hybrid rank"].tolist() == list(range(1, total + 1))
    slider = at.slider(key="inspector_threshold")
    assert slider.value == pytest.approx(DEFAULT_THRESHOLD)
    scores = workspace.score_table(FERMAT)
    passing = sum(r["score"] >= DEFAULT_THRESHOLD for r in scores)
    assert metric(at, "Passages passing") == f"{passing} of {total}"
    assert at.get("vega_lite_chart")  # the score histogram with the threshold rule

    slider.set_value(0.5).run()
    table = full_table(at)
    assert metric(at, "Passages passing") == f"{sum(r['score'] >= 0.5 for r in scores)} of {total}"
    rescued = {r.chunk_id for r in explained if r.rescued}
    assert table["passes"].tolist() == [
        c >= 0.5 or r.chunk_id in rescued
        for c, r in zip(table["cosine"], sorted(explained, key=lambda r: r.fused_rank))
    ]

    # the method selector shows what search returns, and orders the table by its own rank
    labels = {"dense": "Meaning only", "lexical": "Keywords only", "hybrid": "Meaning + keywords"}
    for mode in ("dense", "lexical", "hybrid"):
        at.button_group(key="inspector_mode").set_value(mode).run()
        assert not at.exception
        hits = workspace.retriever.search(FERMAT, mode=mode, threshold=0.5)
        assert metric(at, f"{labels[mode]} returns") == str(len(hits))
        table = full_table(at)
        returned = table[table["returned"] != ""]  # blank, not "None", when not returned
        assert sorted(returned["returned"].astype(int)) == list(range(1, len(hits) + 1))
        assert "None" not in table.to_string()
    at.button_group(key="inspector_mode").set_value("dense").run()
    assert full_table(at)["meaning rank"].tolist() == list(range(1, total + 1))

    # the whole top passage, rendered as in the margin (its Markdown heading a heading, not
    # "## ..."), matched words highlighted
    shown = [h.proto.body for h in at.get("html") if 'class="mg-passage"' in h.proto.body]
    assert shown and "Fermat" in shown[0]
    assert '<mark class="mg-hl">Fermat</mark>' in shown[0] and "##" not in shown[0]


def test_chunking_lab_previews_and_reindexes(app_env, workspace):
    (doc,) = seed(workspace, ("how-marginalia-works.md", (SAMPLES / "how-marginalia-works.md").read_bytes()))
    text, starts = workspace.store.document_source(doc["id"])
    expected = chunk_text(text, target=500, overlap=100, page_starts=starts)
    assert len(expected) > doc["chunk_count"]

    at = start(INSPECTOR)
    at.button_group(key="inspector_section").set_value("Passage size").run()
    assert at.button(key="lab_reindex").disabled  # nothing changed yet
    at.number_input(key=f"lab-target-{doc['id']}").set_value(500)
    at.number_input(key=f"lab-overlap-{doc['id']}").set_value(100).run()
    assert not at.exception
    assert metric(at, "Passages") == str(len(expected))
    from test_inspector_page import html_table

    preview = html_table(at, "characters")  # a wrapping table: nothing cut at 1280 px
    assert [int(r["characters"]) for r in preview] == [len(c.text) for c in expected]
    assert [r["text"] for r in preview] == [  # first words, opening to the whole passage
        " ".join(c.text.split()[:14]) + ("…" if len(c.text.split()) > 14 else "")
        for c in expected]
    assert "start" not in preview[0]  # no character offsets on the page

    at.button(key="lab_reindex").click().run()
    assert not at.exception
    stored = workspace.store.get_document(doc["id"])
    assert (stored.chunk_count, stored.chunk_target, stored.chunk_overlap) == (
        len(expected), 500, 100
    )
    assert at.success and "re-indexed" in plain(at.success[0].value)


def test_every_run_renders_the_shell_even_in_streamlits_legacy_page_mode(app_env):
    """AppTest starts each run in Streamlit's legacy multipage mode (the page files live in
    ``pages/``), so its second run executes the previous page's file *without* app.py -- what a
    fresh server does when a visitor's first URL is a page's. The page's shell call renders the
    whole app around it, with no Streamlit internals touched."""
    at = start()
    for _ in range(2):
        at.run()
        assert not at.exception
        assert any("Offline mode" in v for v in at.sidebar.markdown.values + at.sidebar.caption.values
                   ) or at.sidebar.badge, "the sidebar (app shell) is missing"
        assert at.chat_input, "the Chat page did not render"


@pytest.mark.parametrize("page_file", ["pages/documents.py", "pages/inspector.py", "pages/chat.py"])
def test_a_page_file_run_alone_renders_inside_the_shell(app_env, page_file):
    at = AppTest.from_file(str(ROOT / page_file), default_timeout=60).run()
    assert not at.exception
    assert at.sidebar.button(key="new_conversation"), "no sidebar: the shell did not run"
    assert at.title or at.chat_input


def test_pages_without_documents_say_so(app_env):
    at = start(INSPECTOR)
    assert at.info and "add documents first" in at.info[0].value
    store = Store(app_env)
    assert store.list_documents() == []
    store.close()


# --------------------------------------------------------------------------- background jobs


def test_running_job_shows_everywhere_with_progress_and_cancels(app_env, workspace):
    """A job this process runs (claimed here, so the app's worker leaves it alone) appears in
    every page's sidebar indicator and in the Documents queue, whose Cancel asks it to stop."""
    [job] = workspace.submit([("long.md", GOOD_MD * 50)])
    claimed = workspace.job_queue.claim()
    assert claimed.id == job.id
    workspace.store.conn.execute(
        "UPDATE ingest_jobs SET stage = 'embedding', chunks_done = 3, chunks_total = 9, "
        "pages_done = 1, pages_total = 1 WHERE id = ?", (job.id,))
    at = start()
    indicator = " ".join(m.value for m in at.sidebar.markdown)
    assert "Indexing 1 file" in indicator
    bars = [p for p in at.sidebar.get("progress")]
    assert bars and "3 of 9 passages embedded" in bars[0].proto.text
    at.switch_page(DOCUMENTS).run()
    assert any(h.value == "Indexing" for h in at.subheader)
    at.button(key=f"cancel-{job.id}").click().run()
    assert not at.exception
    assert workspace.job(job.id).cancel_requested
    assert at.button(key=f"cancel-{job.id}").disabled


def test_interrupted_upload_is_offered_for_resume_and_then_indexed(app_env, workspace):
    [job] = workspace.submit([("sourdough.md", GOOD_MD)])
    workspace.store.conn.execute(  # as a process that died mid-way would have left it
        "UPDATE ingest_jobs SET status = 'running', owner = 'elsewhere:1:gone', "
        "heartbeat = '2000-01-01T00:00:00+00:00' WHERE id = ?", (job.id,))
    at = start(DOCUMENTS)
    assert "interrupted" in " ".join(c.value for c in at.sidebar.caption)
    assert workspace.job(job.id).status == "interrupted"
    at.button(key=f"resume-{job.id}").click().run()
    assert not at.exception
    settle(at, app_env)
    assert at.dataframe[0].value["Document"].tolist() == ["sourdough.md"]


FORMAT_FILES = ROOT / "tests" / "data" / "formats"


def test_office_files_and_tricky_names_from_the_documents_page(app_env, workspace):
    """New formats upload like any file, their table rows name slides/rows/sections, and a
    file name with a NUL byte, a newline, a right-to-left override or 300 characters is shown
    as text (an upload named ``nul\\x00byte.txt`` used to end the page in an exception)."""
    at = start(DOCUMENTS)
    at.file_uploader[0].set_value(
        [
            ("txt-fit-text.pptx", (FORMAT_FILES / "txt-fit-text.pptx").read_bytes(),
             "application/vnd.openxmlformats-officedocument.presentationml.presentation"),
            ("inventory-table.xlsx", (FORMAT_FILES / "inventory-table.xlsx").read_bytes(),
             "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"),
            ("pass_protected.xlsx", (FORMAT_FILES / "pass_protected.xlsx").read_bytes(), ""),
            ("nul\x00byte.txt", b"A note about quince jelly and muslin bags.", "text/plain"),
            ("line\nbreak\u202egnp.md", b"# Pruning\n\nCut back to an outward bud.", ""),
            ("r" * 300 + ".md", b"# Long\n\nA file with a very long name about grafting.", ""),
        ]
    ).run()
    assert not at.exception
    settle(at, app_env)
    assert not at.exception
    labels = [s.label for s in at.status]
    assert any("txt\\-fit\\-text\\.pptx — indexed" in x and "1 slide" in x for x in labels), labels
    assert any("inventory" in x and "4 rows" in x for x in labels), labels
    refused = next(s for s in at.status if "pass\\_protected" in s.label)
    assert refused.state == "error" and "password-protected" in plain(refused.markdown[0].value)
    docs = next(d.value for d in at.dataframe if "Pages" in d.value.columns)
    by_name = dict(zip(docs["Document"], docs["Pages"], strict=True))
    assert by_name["txt-fit-text.pptx"] == "1 slide" and by_name["inventory-table.xlsx"] == "4 rows"
    names = list(by_name)
    assert "nul_byte.txt" in names and all(ch.isprintable() for n in names for ch in n)
    assert all(len(n) <= 200 for n in names)
