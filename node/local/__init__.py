"""Running nodes on this machine: a node's home (``init``, ``config``), its processes
(``supervisor``, ``procs``) and local multi-node networks (``testnet``, ``testnet_market``,
``wan`` for toxiproxy links)."""
