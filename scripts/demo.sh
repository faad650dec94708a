#!/usr/bin/env bash
# The main job, narrated: set up, then show what servectl would run on the field report's cluster.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
S=.venv/bin/servectl
echo "==> servectl inventory check -i inventory.example.yml"
$S inventory check -i inventory.example.yml
echo "==> servectl plan -i inventory.example.yml"
$S plan -i inventory.example.yml
