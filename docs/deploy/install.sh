#!/bin/sh
# docs/deploy.md's install steps, as the page shows them (run as root from a
# checkout of this repository; .ci/run runs this file on its throwaway machine).
set -eu
# 1. A user and group of its own, without a login.
id stalk >/dev/null 2>&1 || useradd --system --user-group --no-create-home \
    --home-dir /var/lib/twisted-stalk --shell /usr/sbin/nologin stalk
# 2. The program, in a venv under /opt, on the system's Python (one under a home
#    directory, pyenv's, is out of the service user's reach), from this checkout;
#    add extras as needed, e.g. '.[tls,postgresql]'.
/usr/bin/python3 -m venv /opt/twisted-stalk
/opt/twisted-stalk/bin/pip install --quiet .
/opt/twisted-stalk/bin/twistd beanstalk --help >/dev/null  # writes Twisted's plugin cache now
# 3. The binlog directory: the service's own, nobody else's.
install -d -o stalk -g stalk -m 0750 /var/lib/twisted-stalk
# 4. The console's credentials: root writes them, the service may only read them.
#    The first person, an admin who logs in from a browser: the tool asks for the
#    password ("ADMIN=alice sh docs/deploy/install.sh" names them; "admin" otherwise);
#    then a token for scripts, printed once (the last line).
install -d -o root -g stalk -m 0750 /etc/twisted-stalk
/opt/twisted-stalk/bin/python -m twisted_stalk.web.auth add "${ADMIN:-admin}" --file /etc/twisted-stalk/console.auth
/opt/twisted-stalk/bin/python -m twisted_stalk.web.auth token deploy --file /etc/twisted-stalk/console.auth
chown root:stalk /etc/twisted-stalk/console.auth
chmod 0640 /etc/twisted-stalk/console.auth
# 5. The units (twisted-stalk.service runs twistd, stalkd.service the drop-in: pick one).
install -m 0644 docs/deploy/twisted-stalk.service docs/deploy/stalkd.service /etc/systemd/system/
systemctl daemon-reload
systemctl enable --now twisted-stalk.service
