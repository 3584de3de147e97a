"""The Python client against a headroomd with TLS and tokens (tests/tls_auth_test.sh starts
it): no token and a wrong token are UNAUTHENTICATED, a plaintext channel and a channel that
trusts another CA are UNAVAILABLE, and the right CA with the right token lists the jobs.

Usage: tls_auth_test.py --server ADDR --ca CA.pem --other-ca OTHER.pem --token TOKEN
"""

import argparse
import sys

from headroom_client import Client, HeadroomError, zoo


def expect_error(code, what, call):
    """Fails unless call() raises HeadroomError with `code`; returns its message."""
    try:
        call()
    except HeadroomError as err:
        if err.code != code:
            sys.exit(f"FAIL: {what}: expected {code}, got {err.code}: {err}")
        print(f"ok: {what}: {err}")
        return str(err)
    sys.exit(f"FAIL: {what}: expected {code}, the call succeeded")


def main():
    parser = argparse.ArgumentParser()
    for flag in ("--server", "--ca", "--other-ca", "--token"):
        parser.add_argument(flag, required=True)
    args = parser.parse_args()

    with Client(args.server, tls_ca=args.ca) as client:
        expect_error("UNAUTHENTICATED", "no token", client.jobs)
    with Client(args.server, tls_ca=args.ca, token="not-" + args.token) as client:
        message = expect_error("UNAUTHENTICATED", "wrong token", client.jobs)
        if "not-" + args.token in message:
            sys.exit(f"FAIL: the error repeats the token sent: {message}")
    with Client(args.server) as client:
        expect_error("UNAVAILABLE", "plaintext against TLS", client.jobs)
    with Client(args.server, tls_ca=args.other_ca, token=args.token) as client:
        expect_error("UNAVAILABLE", "a CA that did not sign the daemon's certificate",
                     client.jobs)
    with open(args.ca, "rb") as f:
        ca_bytes = f.read()
    with Client(args.server, tls_ca=ca_bytes, token=args.token) as client:
        jobs = client.jobs()
        plan = client.plan(zoo("mlp", batch=8))
        if plan.summary.arena_bytes == 0:
            sys.exit(f"FAIL: an empty plan: {plan.summary}")
        print(f"ok: the right CA and token: {len(jobs)} jobs, a plan of "
              f"{plan.summary.arena_bytes} arena bytes")
    try:
        Client(args.server, token=args.token)
        sys.exit("FAIL: a token without tls_ca was accepted")
    except ValueError as err:
        print(f"ok: a token without tls_ca: {err}")
    print("PASS tls_auth_test.py")


if __name__ == "__main__":
    main()
