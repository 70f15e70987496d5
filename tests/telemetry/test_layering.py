import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_telemetry_backend_never_imports_streamlit():
    code = (
        "import sys, backend.telemetry, backend.telemetry.sampler, state.telemetry; "
        "bad = sorted(m for m in sys.modules if m.split('.')[0] == 'streamlit'); "
        "print(bad); sys.exit(1 if bad else 0)"
    )
    r = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
