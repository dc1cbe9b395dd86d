"""The REINFORCE controller: its policy over the choices and its Adam."""
