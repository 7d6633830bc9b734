  | sh
echo installed
