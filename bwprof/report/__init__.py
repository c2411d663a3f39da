"""Result rows, files and terminal output. Nothing here touches a GPU."""
