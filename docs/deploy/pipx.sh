#!/bin/sh
# docs/deploy.md's pipx variant of install step 2 and of the units, as the page
# shows them (run as root from a checkout after install.sh; .ci/run runs it).
set -eu
PIPX_HOME=/opt/pipx PIPX_BIN_DIR=/usr/local/bin pipx install .
/opt/pipx/venvs/twisted-stalk/bin/twistd beanstalk --help >/dev/null  # the plugin cache
for unit in twisted-stalk.service stalkd.service; do
  sed 's#/opt/twisted-stalk/bin/#/opt/pipx/venvs/twisted-stalk/bin/#' "docs/deploy/$unit" > "/etc/systemd/system/$unit"
done
systemctl daemon-reload
