#!/bin/sh
# Fetch the installer.
curl -fsSL https://get.tools.example.net/formatter \
