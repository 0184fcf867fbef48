"""Drives python3-gearman (0.1.0, from PyPI) for wasmgear's tests: submits one job and prints
what the client saw, as JSON.

    python gearman_py.py HOST:PORT FUNCTION DATA [bg]
"""

import json
import sys

import python3_gearman as gearman


def text(value):
    if value is None or isinstance(value, str):
        return value
    return value.decode(errors="replace")


def main():
    server, function, data, *flags = sys.argv[1:]
    background = "bg" in flags
    client = gearman.GearmanClient([server])
    request = client.submit_job(
        function,
        data,
        background=background,
        wait_until_complete=not background,
        poll_timeout=60,
    )
    status = request.status or {}
    print(
        json.dumps(
            {
                "state": request.state,
                "result": text(request.result),
                "warnings": [text(w) for w in request.warning_updates],
                "numerator": status.get("numerator"),
                "denominator": status.get("denominator"),
                "timed_out": request.timed_out,
            }
        )
    )


if __name__ == "__main__":
    main()
