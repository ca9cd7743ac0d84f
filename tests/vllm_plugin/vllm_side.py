"""The vLLM side of the plugin's tests, run by vllm_helpers.run_vllm in the plugin's own environment
(.venv-vllm: vLLM and speechlm_vllm, no speechlm). Reads a JSON payload on stdin, prints one JSON line.

    vllm_side.py offline FOLDER   {"clips": [wav paths], "recordings": [wav paths]}
      -> {"windows": [{"text", "tokens"}] per clip (each clip one request, as SpeechLM.transcribe
          takes it), "texts": [text] per recording (the long-form cut, speechlm_vllm.offline.transcribe),
          "budgets": [exact budget] per clip, "placeholder_budgets": [the engine's] per clip}
      with "asked": [{"language", "task", "context"}, ...] in the payload -> {"asked": [windows] per asking};
      "dtype": vLLM's dtype (default "auto")
"""

import json
import sys

MARK = "SPEECHLM-VLLM-RESULT "  # vLLM logs to stdout too: the answer is the line with this mark


def offline(folder: str, payload: dict) -> dict:
    import soundfile as sf
    from vllm import LLM

    from speechlm_vllm import stops
    from speechlm_vllm.folder import load
    from speechlm_vllm.offline import transcribe, transcribe_windows

    dtype = payload.get("dtype", "auto")  # vLLM's "auto" runs an fp32 folder in a 16-bit type
    llm = LLM(folder, max_model_len=2048, enforce_eager=True, limit_mm_per_prompt={"audio": 1}, seed=0, dtype=dtype)
    read = lambda p: sf.read(p, dtype="float32")[0]  # noqa: E731
    clips = [read(p) for p in payload["clips"]]
    f = load(folder)
    if "asked" in payload:  # per asking ({"language", "task", "context"}), the clips' windows
        return {"asked": [transcribe_windows(llm, clips, **a) for a in payload["asked"]]}
    return {
        "windows": transcribe_windows(llm, clips),
        "texts": transcribe(llm, [read(p) for p in payload["recordings"]]),
        "budgets": [stops.budget(f, len(w)) for w in clips],
        "placeholder_budgets": [stops.budget_for_placeholders(f, f.audio_tokens(len(w))) for w in clips],
    }


def main():
    command, folder = sys.argv[1], sys.argv[2]
    payload = json.loads(sys.stdin.read())
    out = {"offline": offline}[command](folder, payload)
    print(MARK + json.dumps(out), flush=True)


if __name__ == "__main__":  # vLLM spawns its engine process: the guard keeps it from running this again
    main()
