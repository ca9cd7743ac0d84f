"""python -m speechlm.demo: the demo's command (speechlm.demo.cli), the same as `speechlm demo`."""

from speechlm.demo.cli import main

if __name__ == "__main__":
    main()
