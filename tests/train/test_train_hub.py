"""Hub uploads run in the background, retry, report failures without the token, and never raise."""

import logging

from speechlm.train.hub import HubUploader


def test_failed_upload_is_retried_reported_and_not_fatal(tmp_path, monkeypatch, caplog):
    secret = "hf_thisIsNotARealTokenButMustNeverBePrinted"
    monkeypatch.setenv("HF_TOKEN", secret)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # the machine has no Hub: every try fails for real
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text("{}")
    with caplog.at_level(logging.INFO, logger="speechlm.train"):
        up = HubUploader("someone/speechlm-test", retries=2, backoff_s=0.01)
        up.submit(tmp_path / "model", "step 10")
        up.close(timeout=60)
    assert up.failures == ["step 10"] and up.uploaded == []
    assert "try 1/2" in caplog.text and "FAILED after 2 tries" in caplog.text
    assert secret not in caplog.text
