"""What pages share: the sidebar controls, the head picker, lesson and lab sections, embedded HTML figures."""
