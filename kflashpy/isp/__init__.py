"""The serial side of kflashpy: framing, ports, board reset, ROM and stage-2 protocols."""
