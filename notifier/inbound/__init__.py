"""The inbound wing: reports that come back after a delivery was accepted (bounces and
complaints mailed to the return path), taken in, understood and applied."""
