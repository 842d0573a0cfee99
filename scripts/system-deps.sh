#!/usr/bin/env bash
# System packages the integration tests need. On CI (CI=true) missing ones are installed;
# elsewhere we only say what is missing, and the tests that need it skip with that reason.
set -euo pipefail
need=()
# The git sensor's tests make real repositories.
command -v git >/dev/null 2>&1 || need+=(git)
# The MQTT tests start their own broker and use a client we did not write.
command -v mosquitto >/dev/null 2>&1 || [ -x /usr/sbin/mosquitto ] || need+=(mosquitto)
command -v mosquitto_pub >/dev/null 2>&1 || need+=(mosquitto-clients)
# The runtime sensor's tests run real Nagios plugins (check_tcp, check_procs, check_disk).
[ -x /usr/lib/nagios/plugins/check_tcp ] || need+=(monitoring-plugins-basic)
# The review page is tested in a real headless Chromium (Playwright drives the system one).
command -v chromium >/dev/null 2>&1 || need+=(chromium)
# tests/deploy: systemd-analyze (verify, security), systemd-sysusers and systemd-tmpfiles,
# and libseccomp (a dependency of the package) for the unit's seccomp rules.
command -v systemd-analyze >/dev/null 2>&1 || need+=(systemd)
# The code_test sensor runs the tests under check inside bubblewrap (tests/security).
command -v bwrap >/dev/null 2>&1 || need+=(bubblewrap)
# The PostgreSQL store's tests start their own server (initdb + pg_ctl in a temp dir, on a
# free loopback port; tests/pgserver.py), never the machine's service.
compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null || command -v initdb >/dev/null 2>&1 \
  || need+=(postgresql)
command -v psql >/dev/null 2>&1 || need+=(postgresql-client)
if [ ${#need[@]} -eq 0 ]; then exit 0; fi
if [ "${CI:-}" = "true" ] && command -v apt-get >/dev/null 2>&1; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}"
else
  echo "missing system packages (install them or run with CI=true): ${need[*]}" >&2
fi
