"""Scores by part (speechlm.scoring.by_part): a clip's part is named in its id (`<split>-<part>-`), a part of
empty references is scored by the share transcribed as empty, any other by WER; any source may name
parts this way, not only the demo's."""

from __future__ import annotations

import pytest

from speechlm.scoring import by_part, wer


@pytest.mark.parametrize(
    "clip_id, split, part",
    [
        ("speech_test-random-00007", "test", "random"),
        ("test-seen-00001", "test", "seen"),  # an orig id alone
        ("my_set_eval-quiet2-001", "eval", "quiet2"),  # source names may hold underscores
        ("speech_eval-seen-00001", "test", None),  # another split's clip
        ("synthetic_test-00012", "test", None),  # numbers name no part
        ("hf_test-3rd-0001", "test", None),  # a part starts with a letter
        ("ls_latest-news-0001", "test", None),  # the split must start the orig id (or follow an underscore)
        ("ls_1272-128104-0000", "test", None),
    ],
)
def test_a_clip_id_names_its_part(clip_id, split, part):
    assert by_part.part_of(clip_id, split) == part


def test_parts_are_scored_by_wer_or_by_the_share_said_empty():
    rows = [
        {"id": "car_test-street-1", "reference": "turn left here", "hypothesis": "turn left there"},
        {"id": "car_test-street-2", "reference": "Stop.", "hypothesis": "stop", "capped": True},
        {"id": "car_test-idle-1", "reference": "", "hypothesis": "", "loop": True},
        {"id": "car_test-idle-2", "reference": " ", "hypothesis": "Thank you."},
        {"id": "car_test-idle-3", "reference": "", "hypothesis": "Uh."},  # a filler: nothing left once normalized
        {"id": "car_test-mixed-1", "reference": "", "hypothesis": "hello"},  # one empty reference among words
        {"id": "car_test-mixed-2", "reference": "good morning", "hypothesis": "good morning"},
        {"id": "car_test-00009", "reference": "no part", "hypothesis": "none"},  # not scored by part
        {"id": "car_eval-street-1", "reference": "another split", "hypothesis": ""},
    ]
    parts = by_part.score(rows, "test")
    assert list(parts) == ["idle", "mixed", "street"]  # by name
    street = wer.score(["turn left here", "Stop."], ["turn left there", "stop"])
    assert parts["street"] == {"clips": 2, "capped": 1, "loops": 0, **street}
    assert parts["street"]["wer"] == pytest.approx(1 / 4)
    assert parts["idle"] == {"clips": 3, "capped": 0, "loops": 1, "empty_share": pytest.approx(2 / 3)}
    assert "wer" in parts["mixed"] and "empty_share" not in parts["mixed"]
    assert by_part.metrics(parts) == {
        "eval/empty_share/idle": pytest.approx(2 / 3),
        "eval/wer/mixed": parts["mixed"]["wer"],
        "eval/wer/street": pytest.approx(1 / 4),
    }
    assert by_part.metrics({"idle": parts["idle"]}, "test") == {"test/empty_share/idle": pytest.approx(2 / 3)}
    assert by_part.score([{"id": "x_test-1", "reference": "a", "hypothesis": "a"}]) == {}
