| sh
echo "toolchain ready"
